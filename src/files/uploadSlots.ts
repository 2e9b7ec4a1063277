// How many uploads may stream at once (docs/CONTRACT.md §16): max_concurrent_uploads on
// this server, max_concurrent_uploads_per_key for one key. Each upload holds
// a temp file and, for a batch file, its validator Workers (a scanner and
// the duplicate finder, more scanners while a large file streams in: JS VMs,
// ≈2.5 MB and a thread each; 60 stalled uploads, unlimited, measured +300 MB
// and +124 threads), so the limit on uploads is the limit on those. An upload past it is refused with 429 before a
// byte of its body is read.
import type { AppContext } from "../context";
import { ApiError } from "../errors";

/** Seconds a refused client is told to wait: uploads end (or are ended by the idle timeout) on their own. */
const RETRY_AFTER_S = "1";

export class UploadSlots {
  private total = 0;
  private readonly byKey = new Map<string, number>();

  constructor(
    private readonly max: number,
    private readonly maxPerKey: number,
  ) {}

  /** Uploads streaming now. */
  get active(): number {
    return this.total;
  }

  /** Takes a slot for `keyId` or throws 429; the function returned gives it back (once). */
  take(keyId: string): () => void {
    const mine = this.byKey.get(keyId) ?? 0;
    if (this.total >= this.max) throw busy(`This server is taking ${this.max} uploads already`);
    if (mine >= this.maxPerKey) throw busy(`This key has ${this.maxPerKey} uploads under way already`);
    this.total++;
    this.byKey.set(keyId, mine + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.total--;
      const left = this.byKey.get(keyId)! - 1;
      if (left === 0) this.byKey.delete(keyId);
      else this.byKey.set(keyId, left);
    };
  }
}

// The body is not read: the connection closes after the answer (Bun would
// otherwise read and drop the whole of a chunked one first).
const busy = (why: string) =>
  new ApiError("rate_limit_exceeded", `${why}; retry when one has finished`, { headers: { "retry-after": RETRY_AFTER_S, connection: "close" } });

const slots = new WeakMap<AppContext, UploadSlots>();

/** The server's upload slots (one set per AppContext, made on first use). */
export function uploadSlotsOf(ctx: AppContext): UploadSlots {
  let s = slots.get(ctx);
  if (!s) slots.set(ctx, (s = new UploadSlots(ctx.config.maxConcurrentUploads, ctx.config.maxConcurrentUploadsPerKey)));
  return s;
}

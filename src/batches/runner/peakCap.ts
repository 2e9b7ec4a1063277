// Off-peak hours on this node (docs/CONTRACT.md §18): which of the batches running here
// are held to the model's peak share now, and the share the scheduler
// applies. A batch's place in the batch order (its BatchKey: deadline hour,
// project, batch, capped) is made here once and shared by all its lines'
// waits in the scheduler, so a change of `capped` reaches them in place.
//
// Capped: a window of 24h or more, during peak hours, unless its estimated
// finish at the capped rate passes its deadline (then uncapped for good).
import type { AppContext } from "../../context";
import { bucketOf, type BatchKey } from "../../scheduling/order";
import { peakNow } from "../../scheduling/peakHours";
import { windowHours, type BatchRow } from "../service";
import type { TrackedBatch } from "../statusDetails";

interface Keyed {
  key: BatchKey;
  hours: number;
  expiresAt: number;
  seenAt: number;
}

/** A batch not seen here for this long, with no shard running here, is forgotten. */
const FORGET_MS = 600_000;

export class PeakCap {
  /** The batch order's key of each batch whose shards ran here, with what the cap needs. */
  private readonly keys = new Map<string, Keyed>();
  /** Capped batches found to miss their deadline at the capped rate: uncapped for good. */
  private readonly overridden = new Set<string>();

  constructor(
    private readonly ctx: AppContext,
    /** A batch's estimated finish at its rate now (Unix s), or null (BatchProgress.etaOf). */
    private readonly etaOf: (batchId: string) => number | null,
  ) {}

  /** The key of a batch whose shard runs here (made, and capped or not, the first time). */
  keyOf(batch: BatchRow): BatchKey {
    let k = this.keys.get(batch.id);
    if (!k) {
      k = { key: { bucket: bucketOf(batch.expiresAt, this.ctx.config.batches.hourSeconds), project: batch.project, batch: batch.id, capped: false }, hours: windowHours(batch.completionWindow), expiresAt: batch.expiresAt, seenAt: Date.now() };
      this.keys.set(batch.id, k);
      this.capOne(k, this.ctx.scheduler.peakShare);
    }
    k.seenAt = Date.now();
    return k.key;
  }

  /** The key of a batch running here, if known (a Worker's slot asks carry only the batch id). */
  keyFor(batchId: string): BatchKey | undefined {
    return this.keys.get(batchId)?.key;
  }

  /** Whether a batch is capped now; true if that changed it to uncapped. */
  private capOne(k: Keyed, share: number): boolean {
    const wasCapped = k.key.capped;
    let capped = share < 1 && k.hours >= 24 && !this.overridden.has(k.key.batch);
    if (capped) {
      // Its estimated finish at the capped rate (the rate it has now, while capped) passes its deadline: uncapped.
      const eta = this.etaOf(k.key.batch);
      if (eta !== null && eta > k.expiresAt) {
        this.overridden.add(k.key.batch);
        this.ctx.log.info("batch uncapped in peak hours: it would miss its deadline", { batch_id: k.key.batch, estimated_completion_at: eta, expires_at: k.expiresAt });
        capped = false;
      }
    }
    k.key.capped = capped;
    return wasCapped && !capped;
  }

  /** At each tick: the share for the scheduler, and which batches it caps. `running`: the batches with a shard running here. */
  apply(now: number, running: Set<string>): void {
    const { share } = peakNow(this.ctx.config.batches, now);
    this.ctx.scheduler.setPeakShare(share);
    let freed = false;
    for (const [id, k] of this.keys) {
      if (now - k.seenAt > FORGET_MS && !running.has(id)) {
        this.keys.delete(id);
        continue;
      }
      freed = this.capOne(k, share) || freed;
    }
    if (freed) this.ctx.scheduler.pumpAll();
  }

  /** status_details' peak_hours message for a batch held back by the cap now, else null (BatchProgress.peakHours). */
  heldBack(b: TrackedBatch): string | null {
    const k = this.keys.get(b.id);
    if (!k?.key.capped || !b.model) return null;
    const s = this.ctx.scheduler.stats(b.model);
    if (s.cappedQueued === 0) return null;
    return `peak hours: batches with a window of 24h or more get ${Math.round(this.ctx.scheduler.peakShare * 100)}% of model ${b.model}'s capacity (${s.clusterBatchCap} slots${(this.ctx.members?.place().count ?? 1) > 1 ? " across the cluster" : ""})`;
  }
}

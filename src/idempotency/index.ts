// `Idempotency-Key` on the POSTs that make something (docs/CONTRACT.md §22):
// within 24 h and within the key's project, the same key with the same
// request (route and body) answers what the first did — the same status and
// JSON body, the same id, nothing made twice — also when the two arrive
// together or on two nodes. The same key with another request: 409
// `idempotency_key_reused`. One table, `idempotency_keys` (PK project, key;
// src/db/schema/*/idempotencyKeys.ts), shared by every node.
//
// ## Plugging a route in
//
//     return withIdempotency(ctx, request, principal, "POST /batches", rawBodyOf(request)!, async () => {
//       const row = await createBatch(…);   // make the thing, commit it
//       return batchView(row);              // a value (sent as 200 JSON) or a Response
//     });
//
//     // A body read as it streams (src/files/upload.ts):
//     return withIdempotency(ctx, request, principal, "POST /files",
//       { digestOnly: (d) => readOnlyInto(d) },   // a replay reads its body only to compare it
//       (digest) => receive(body, digest));       // digest.update(chunk)… as it reads, then digest.complete()
//
// withIdempotency(ctx, request, principal, route, body, run, opts?):
//   - `route`: a stable name for what the request does, its method and route
//     pattern ("POST /files", "POST /uploads", "POST /v1/messages/batches"):
//     the same key on another route is another request (409). Each route
//     always passes the same kind of `body` (below).
//   - `body`: what identifies the body.
//       * the body as read (a string or bytes: for a JSON route, the raw text,
//         `rawBodyOf(request)`), when it is read before `run` starts;
//       * or a `StreamedBody`, for a body too big to hold (an upload, a
//         256 MB message batch): `run` then feeds the body to the digest it is
//         given while it reads it (`digest.update(…)`, then `digest.complete()`
//         once the whole body is in; skip all that when `digest.active` is
//         false), and `digestOnly(digest)` reads a body only to feed it the
//         same way — what a second request does to compare itself with the
//         first before it replays its answer. Memory stays bounded: nothing
//         but a SHA-256 state is kept. Multipart bodies: ./multipart.ts
//         digests their parts, not the framing (a retry has a new boundary).
//   - `run(digest)`: does the work. Its answer is a Response or a value
//     (answered as 200 JSON, as Elysia does); an ApiError it throws is the
//     answer too. Without an Idempotency-Key header, run is called with an
//     inactive digest and its result returned untouched: nothing else happens.
//   - `opts.errorBody`: for a route whose errors are not OpenAI-shaped
//     (Anthropic's), how a thrown ApiError's body is kept for replay.
//   - Returns run's result for the request that ran, or a Response for one
//     that replays (with `Idempotent-Replayed: true`). Throws what run threw,
//     400 `invalid_value` (param `Idempotency-Key`) for a bad header (1–255
//     printable ASCII characters), and 409 `idempotency_key_reused`.
//
// ## How
//
// The first request inserts the row (`pending`); the primary key lets one
// insert win, on any node. Its answer is kept (`done`) when it is final: a
// 2xx or a 4xx other than 408, 409 and 429. Those three and every 5xx (and a
// client that went away, or anything thrown that is not an ApiError) free
// the key instead: they say "nothing was made, try again", and the client's
// retry must run. A streamed body's answer is kept only if `run` read the
// whole body (digest.complete()): a refusal that stopped reading mid-body
// cannot be compared, so it frees the key too (the retry is refused again).
//
// A second request with the key waits while the row is pending (polling,
// 25 ms growing to 250 ms) and then replays the kept answer, or runs itself
// if the key was freed. A pending row is leased: its request renews
// `created_at` every 5 s, and one not renewed for 30 s (its node died) is
// taken over by the next request with the key. The table's `created_at` is
// also the owner's token: every write of the owner is conditional on the
// value it last wrote, so an owner that was taken over changes nothing.
//
// `request_hash` is `<route tag>:<request hash>`: the first 16 hex digits of
// SHA-256(route), then SHA-256(route, SHA-256(body)) — empty while a streamed
// body is still being read. The route tag lets a request on another route be
// refused at once; the rest decides "the same body".
//
// Rows expire 24 h after the first request (a lookup ignores an expired
// row); sweepIdempotencyKeys, run with the server's minute sweep, deletes them.
//
// The one window left: a node that dies after `run` committed its object but
// before the answer was kept leaves a pending row; once its lease lapses a
// retry runs again.
import { and, eq, lte } from "drizzle-orm";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { nowSeconds } from "../ids";

/** How long a key's answer is kept (docs/CONTRACT.md §22). */
export const KEEP_S = 24 * 3600;
/** A pending row not renewed for this long belongs to a request that died: the next request with the key takes it. */
export const LEASE_MS = 30_000;
/** How often a running request renews its pending row. */
const RENEW_MS = 5_000;
const POLL_FIRST_MS = 25;
const POLL_MAX_MS = 250;

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "idempotent-replayed";

/** What a streamed body is fed to, as it is read. */
export interface BodyDigest {
  /** False when the request has no Idempotency-Key: nothing needs feeding (skip the work). */
  readonly active: boolean;
  update(data: string | Uint8Array): void;
  /** The whole body has been fed. */
  complete(): void;
}

/** A body read as it streams: see the header. */
export interface StreamedBody {
  /** Reads the whole body only to feed `digest`, exactly as `run` feeds it while it reads it, then calls digest.complete(). */
  digestOnly(digest: BodyDigest): Promise<void>;
}

export type IdempotentBody = string | Uint8Array | StreamedBody;

export interface IdempotencyOptions {
  /**
   * The body an ApiError thrown by `run` is answered with, as kept for a
   * replay: OpenAI's `{error: …}` (ApiError.body()) unless the route answers
   * errors in another shape (Anthropic's routes: `(e) => anthropicErrorBody(e.status, e.message)`).
   */
  errorBody?(e: ApiError): unknown;
}

const INACTIVE: BodyDigest = { active: false, update() {}, complete() {} };

class Sha256Digest implements BodyDigest {
  readonly active = true;
  private readonly h = new Bun.CryptoHasher("sha256");
  completed = false;
  update(data: string | Uint8Array): void {
    this.h.update(data);
  }
  complete(): void {
    this.completed = true;
  }
  hex(): string {
    return this.h.digest("hex");
  }
}

const sha256 = (data: string | Uint8Array): string => new Bun.CryptoHasher("sha256").update(data).digest("hex");

/** The request's Idempotency-Key, or null without one; 400 for one that is not 1–255 printable ASCII characters. */
export function idempotencyKeyOf(request: Request): string | null {
  const key = request.headers.get(IDEMPOTENCY_HEADER);
  if (key === null) return null;
  if (key.length < 1 || key.length > 255 || !/^[\x20-\x7e]+$/.test(key))
    throw new ApiError("invalid_value", "The Idempotency-Key header must be 1 to 255 printable ASCII characters", { param: "Idempotency-Key" });
  return key;
}

const reused = () =>
  new ApiError("idempotency_key_reused", "This Idempotency-Key was already used with another request (another route or body) in the last 24 hours", {
    param: "Idempotency-Key",
  });

/** Whether an answer is kept for replay: a final one (2xx, and 4xx but 408/409/429: those say "try again"). */
const keeps = (status: number): boolean => status < 500 && status !== 408 && status !== 409 && status !== 429;

interface Kept {
  status: number;
  body: string;
}

export async function withIdempotency<T>(
  ctx: AppContext,
  request: Request,
  principal: Pick<Principal, "project">,
  route: string,
  body: IdempotentBody,
  run: (digest: BodyDigest) => Promise<T>,
  opts: IdempotencyOptions = {},
): Promise<T | Response> {
  const key = idempotencyKeyOf(request);
  if (key === null) return run(INACTIVE);
  const tag = sha256(route).slice(0, 16);
  const full = (bodyHash: string) => `${tag}:${sha256(`${route}\n${bodyHash}`)}`;
  const streamed = typeof body === "object" && !(body instanceof Uint8Array);
  const known = streamed ? null : full(sha256(body));
  const slot = new KeySlot(ctx, principal.project, key);

  const got = await slot.claim(known ?? `${tag}:`, tag, known, request.signal);
  if (got !== "owner") {
    let mine = known;
    if (mine === null) {
      const d = new Sha256Digest();
      await (body as StreamedBody).digestOnly(d);
      mine = full(d.hex());
    }
    if (mine !== got.requestHash) throw reused();
    return new Response(got.body, { status: got.status, headers: { "content-type": "application/json", [REPLAYED_HEADER]: "true" } });
  }

  const digest = streamed ? new Sha256Digest() : INACTIVE;
  let kept: Kept | null = null;
  try {
    const result = await run(digest);
    kept = await keptOf(result);
    return result;
  } catch (e) {
    if (e instanceof ApiError) kept = { status: e.status, body: JSON.stringify(opts.errorBody ? opts.errorBody(e) : e.body()) };
    throw e;
  } finally {
    const hash = known ?? (digest instanceof Sha256Digest && digest.completed ? full(digest.hex()) : null);
    // The answer goes out either way: a key not recorded is left to its lease.
    await slot.settle(kept && keeps(kept.status) && hash ? { ...kept, hash } : null).catch((e) =>
      ctx.log.error("idempotency key not recorded", { error: String((e as Error)?.message ?? e) }),
    );
  }
}

/** The answer as kept: a JSON Response's status and text, or a value sent as 200 JSON; null for anything else. */
async function keptOf(result: unknown): Promise<Kept | null> {
  if (!(result instanceof Response)) return result === undefined ? null : { status: 200, body: JSON.stringify(result) };
  if (!/json/i.test(result.headers.get("content-type") ?? "") || result.bodyUsed) return null;
  return { status: result.status, body: await result.clone().text() };
}

type DoneRow = { requestHash: string; status: number; body: string };

/** One (project, key): claiming it, renewing its lease, recording or freeing it. */
class KeySlot {
  /** The created_at this request last wrote: its writes are conditional on it. */
  private token = 0;
  private renewer: ReturnType<typeof setInterval> | null = null;
  private renewing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly ctx: AppContext,
    private readonly project: string,
    private readonly key: string,
  ) {}

  private get t() {
    return this.ctx.db.t.idempotencyKeys;
  }

  private where(...more: Parameters<typeof and>) {
    return and(eq(this.t.project, this.project), eq(this.t.key, this.key), ...more);
  }

  /**
   * Takes the key ("owner": run the request), or returns the first
   * request's kept answer once it is done. `pendingHash` is what this
   * request writes while it runs; `known` its full hash when it has one.
   */
  async claim(pendingHash: string, tag: string, known: string | null, signal: AbortSignal): Promise<"owner" | DoneRow> {
    const t = this.t;
    let pause = POLL_FIRST_MS;
    for (;;) {
      const now = Date.now();
      const won = await this.ctx.db
        .insert(t)
        .values({ project: this.project, key: this.key, requestHash: pendingHash, state: "pending", status: null, body: null, createdAt: now, expiresAt: Math.floor(now / 1000) + KEEP_S })
        .onConflictDoNothing()
        .returning({ key: t.key });
      if (won.length > 0) return this.own(now);
      const [row] = await this.ctx.db.select().from(t).where(this.where());
      if (!row) continue; // freed meanwhile
      if (row.expiresAt <= nowSeconds()) {
        await this.ctx.db.delete(t).where(this.where(lte(t.expiresAt, nowSeconds())));
        continue;
      }
      if (row.state === "pending" && now - row.createdAt > LEASE_MS) {
        // Its request died: the key is this one's now.
        const token = Math.max(now, row.createdAt + 1);
        const took = await this.ctx.db
          .update(t)
          .set({ requestHash: pendingHash, createdAt: token, expiresAt: Math.floor(now / 1000) + KEEP_S })
          .where(this.where(eq(t.state, "pending"), eq(t.createdAt, row.createdAt)))
          .returning({ key: t.key });
        if (took.length > 0) return this.own(token);
        continue;
      }
      const [rowTag, rowHash] = row.requestHash.split(":") as [string, string | undefined];
      if (rowTag !== tag) throw reused();
      if (row.state === "done") return row as DoneRow;
      // Both bodies known and different: no need to wait for the first.
      if (known !== null && rowHash && row.requestHash !== known) throw reused();
      if (signal.aborted) throw signal.reason ?? new DOMException("The client went away", "AbortError");
      await Bun.sleep(pause);
      pause = Math.min(pause * 2, POLL_MAX_MS);
    }
  }

  private own(token: number): "owner" {
    this.token = token;
    this.renewer = setInterval(() => {
      this.renewing = this.renew().catch(() => {});
    }, RENEW_MS);
    this.renewer.unref?.();
    return "owner";
  }

  private async renew(): Promise<void> {
    const t = this.t;
    const next = Math.max(Date.now(), this.token + 1);
    const done = await this.ctx.db
      .update(t)
      .set({ createdAt: next })
      .where(this.where(eq(t.state, "pending"), eq(t.createdAt, this.token)))
      .returning({ key: t.key });
    if (done.length > 0) this.token = next;
    else this.stopRenewing(); // taken over: nothing more of this request's is written
  }

  private stopRenewing(): void {
    if (this.renewer !== null) clearInterval(this.renewer);
    this.renewer = null;
  }

  /** Keeps the answer (`done`), or frees the key (null). */
  async settle(answer: (Kept & { hash: string }) | null): Promise<void> {
    this.stopRenewing();
    await this.renewing;
    const t = this.t;
    const mine = this.where(eq(t.state, "pending"), eq(t.createdAt, this.token));
    if (!answer) {
      await this.ctx.db.delete(t).where(mine);
      return;
    }
    await this.ctx.db.update(t).set({ state: "done", requestHash: answer.hash, status: answer.status, body: answer.body }).where(mine);
    // On disk before the answer goes out, as the record it reports.
    await this.ctx.db.syncCommits();
  }
}

/** Deletes the keys older than 24 h (the server's minute sweep). */
export async function sweepIdempotencyKeys(ctx: AppContext): Promise<number> {
  const t = ctx.db.t.idempotencyKeys;
  const gone = await ctx.db.delete(t).where(lte(t.expiresAt, nowSeconds())).returning({ key: t.key });
  return gone.length;
}

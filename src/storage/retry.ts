// Retrying a bucket call where it failed (docs/CONTRACT.md §17): the call
// that failed is tried again, never the larger work around it (one 500 from
// the bucket once made a node run a whole shard again and send most of its
// lines to the engine twice). Real S3 answers 500 InternalError and 503
// SlowDown now and then, and connections get reset; AWS tells clients to
// try the same call again after a while. Every call to the bucket goes
// through withRetries (./bucket.ts is the only place that calls Bun's S3
// client or signs a request), on the HTTP thread and in batch Workers
// alike: one failed call costs that call again, never the work around it
// (failing the caller instead would make one InternalError cost a node a
// whole shard run again).
//
// Backoff: exponential with full jitter (a random wait in [0, min(cap,
// base·2^n))), at least MIN_TRIES tries and as many more as fit in about
// BUDGET_MS. A call that hangs is given up after its timeout and counts as
// a retryable failure. What is not retryable (NoSuchKey, AccessDenied, a bad
// request) fails at once.
//
// Each retry is counted, per operation, for /metrics
// (offpeak_storage_retries_total{op}): on the HTTP thread straight into the
// registry, in a Worker into the delta it sends with its next message
// (src/metrics/worker.ts). Whoever loads this module sets where the counts go
// (setRetryCounter).

export type StorageOp =
  | "create_multipart"
  | "upload_part"
  | "complete_multipart"
  | "abort_multipart"
  | "put"
  | "get"
  | "range"
  | "stat"
  | "list"
  | "delete";

export interface RetryPolicy {
  /** Tries at least this many times (while the error is retryable). */
  minTries: number;
  /** …and keeps trying while the time since the first try is under this. */
  budgetMs: number;
  /** Never more tries than this. */
  maxTries: number;
  baseMs: number;
  capMs: number;
  sleep(ms: number): Promise<void>;
  /** [0, 1) */
  random(): number;
  now(): number;
}

export const DEFAULT_POLICY: RetryPolicy = {
  minTries: 6,
  budgetMs: 30_000,
  maxTries: 12,
  baseMs: 100,
  capMs: 10_000,
  sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
  random: Math.random,
  now: Date.now,
};

let policy: RetryPolicy = DEFAULT_POLICY;

/** Replaces parts of the policy (tests: a fake clock and sleep); returns the previous one. */
export function setRetryPolicy(p: Partial<RetryPolicy>): RetryPolicy {
  const before = policy;
  policy = { ...policy, ...p };
  return before;
}

/** The wait before try `n + 1` after `n` failed tries: full jitter over min(cap, base·2^(n-1)). */
export function backoffMs(failedTries: number, p: Pick<RetryPolicy, "baseMs" | "capMs" | "random"> = policy): number {
  const ceiling = Math.min(p.capMs, p.baseMs * 2 ** Math.max(0, failedTries - 1));
  return Math.floor(p.random() * ceiling);
}

/** Codes that S3 (and S3-compatible stores) answer for trouble on their side: try again. */
const RETRYABLE_CODES = new Set([
  "InternalError",
  "SlowDown",
  "ServiceUnavailable",
  "RequestTimeout",
  "RequestTimeTooSkewed",
  "Throttling",
  "ThrottlingException",
  "TooManyRequests",
  "OperationAborted",
  "BadDigest",
  "IncompleteBody",
  // Bun's S3 client: a 5xx answer without a body (HEAD), a connection closed or refused.
  "UnknownError",
  "ConnectionClosed",
  "ConnectionRefused",
  "ConnectionTimeout",
  // Sockets (fetch, node:net).
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "UND_ERR_SOCKET",
  "FailedToOpenSocket",
]);

/** Whether a failed bucket call is worth trying again: trouble on the bucket's side or on the way, never an answer about the request. */
export function isRetryable(e: unknown): boolean {
  if (!e || typeof e !== "object") return false;
  const err = e as { code?: unknown; name?: unknown; status?: unknown; cause?: unknown };
  const status = typeof err.status === "number" ? err.status : null;
  if (status !== null && (status >= 500 || status === 429 || status === 408)) return true;
  if (typeof err.code === "string" && RETRYABLE_CODES.has(err.code)) return true;
  if (err.name === "TimeoutError" || err.code === "TimeoutError") return true;
  if (err.cause && err.cause !== e) return isRetryable(err.cause);
  return false;
}

/** A call that took longer than its timeout (retryable). */
export class StorageTimeoutError extends Error {
  override readonly name = "TimeoutError";
  readonly code = "TimeoutError";
  constructor(op: StorageOp, ms: number) {
    super(`bucket ${op} did not answer within ${ms} ms`);
  }
}

let counter: (op: StorageOp) => void = () => {};
/** Where retries are counted (main thread: the registry; a Worker: its metrics delta). */
export function setRetryCounter(count: (op: StorageOp) => void): void {
  counter = count;
}

export interface RetryOptions {
  /** Each try is given up after this long (a retryable failure); none by default. */
  timeoutMs?: number;
  /** Tries at most this many times (a health probe: 1). */
  maxTries?: number;
  /** Whether a failure is retryable (default isRetryable). */
  retryable?: (e: unknown) => boolean;
}

/**
 * Runs `fn` (one bucket call; `attempt` counts from 1) until it succeeds, a
 * failure is not retryable, or the tries are spent; then throws the last
 * failure. `fn` must be safe to run again: the same request again.
 */
export async function withRetries<T>(op: StorageOp, fn: (attempt: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const p = policy;
  const started = p.now();
  const maxTries = Math.min(opts.maxTries ?? p.maxTries, p.maxTries);
  const retryable = opts.retryable ?? isRetryable;
  for (let attempt = 1; ; attempt++) {
    try {
      return opts.timeoutMs ? await timed(op, fn(attempt), opts.timeoutMs) : await fn(attempt);
    } catch (e) {
      const more = attempt < maxTries && (attempt < p.minTries || p.now() - started < p.budgetMs);
      if (!more || !retryable(e)) throw e;
      counter(op);
      await p.sleep(backoffMs(attempt, p));
    }
  }
}

function timed<T>(op: StorageOp, work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new StorageTimeoutError(op, ms)), ms)));
  // A call given up on may still settle later: its outcome is dropped.
  work.catch(() => {});
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Bytes [start, end) of an object as one stream that survives failures: a
 * read that fails (a reset in the middle of the body, an InternalError at
 * the start) opens the object again at the first byte not yet delivered,
 * after a backoff, within the same retry budget as any call. `open(from)`
 * gives the bytes from `from` to `end` (or to the object's end when `end`
 * is undefined). A read that waits longer than `idleMs` for the next chunk
 * counts as a failure too.
 */
export function resumableStream(op: "get" | "range", open: (from: number) => ReadableStream<Uint8Array>, start: number, end: number | undefined, idleMs = 60_000): ReadableStream<Uint8Array> {
  let at = start;
  let reader: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(reason?: unknown): Promise<void> } | null = null;
  const readOnce = async (): Promise<Uint8Array | null> =>
    withRetries(op, async () => {
      const current = (reader ??= open(at).getReader());
      try {
        const r = await timed(op, current.read(), idleMs);
        if (r.done || !r.value) {
          if (end !== undefined && at < end) throw Object.assign(new Error(`the bucket's answer ended at byte ${at} of ${end}`), { code: "IncompleteBody" });
          return null;
        }
        return r.value;
      } catch (e) {
        const r = reader;
        reader = null;
        r?.cancel().catch(() => {});
        throw e;
      }
    });
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          if (end !== undefined && at >= end) {
            reader?.cancel().catch(() => {});
            reader = null;
            return controller.close();
          }
          const chunk = await readOnce();
          if (chunk === null) return controller.close();
          if (chunk.length === 0) continue;
          // Never more than asked for (an answer longer than its range would shift every later byte).
          const piece = end !== undefined && at + chunk.length > end ? chunk.subarray(0, end - at) : chunk;
          at += piece.length;
          controller.enqueue(piece);
          return;
        }
      },
      cancel(reason) {
        const r = reader;
        reader = null;
        return r?.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

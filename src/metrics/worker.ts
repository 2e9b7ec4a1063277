// What a batch Worker counts for /metrics, kept as plain numbers in the
// Worker and handed to the main thread as a delta on the messages it sends
// anyway (progress every 250 ms, done, paused): no message per line, and the
// per-line cost is one Map lookup skipped for runs of the same model.
export interface WorkerMetricsDelta {
  /** model → [lines with a result, of which failed] */
  lines: Record<string, [number, number]>;
  /** model → upstream attempts */
  upstreamRequests: Record<string, number>;
  /** `${model}\t${reason}` → upstream attempts without a 2xx answer */
  upstreamErrors: Record<string, number>;
  /** model → attempts that were retries */
  retries: Record<string, number>;
  /** storage operation → bucket calls tried again (src/storage/retry.ts) */
  storageRetries: Record<string, number>;
}

let lines = new Map<string, [number, number]>();
let lastModel: string | null = null;
let lastCell: [number, number] = [0, 0];
let upstreamRequests: Record<string, number> = {};
let upstreamErrors: Record<string, number> = {};
let retries: Record<string, number> = {};
let storageRetries: Record<string, number> = {};
let dirty = false;

/** The reason label of an upstream failure: a status class, or what went wrong without one. */
export function upstreamReason(status: number | "timeout" | "connection"): string {
  if (typeof status === "string") return status;
  if (status === 408 || status === 429) return `http_${status}`;
  return status >= 500 ? "http_5xx" : "http_4xx";
}

/** One batch line got its result line (hot path: every line). */
export function countLine(model: string, ok: boolean): void {
  if (model !== lastModel) {
    let c = lines.get(model);
    if (!c) lines.set(model, (c = [0, 0]));
    lastModel = model;
    lastCell = c;
  }
  lastCell[0]++;
  if (!ok) lastCell[1]++;
  dirty = true;
}

/** One attempt of a batch request to an upstream; `failure` when it got no 2xx answer. */
export function countUpstreamAttempt(model: string, attempt: number, failure: number | "timeout" | "connection" | null): void {
  upstreamRequests[model] = (upstreamRequests[model] ?? 0) + 1;
  if (attempt > 1) retries[model] = (retries[model] ?? 0) + 1;
  if (failure !== null) {
    const key = `${model}\t${upstreamReason(failure)}`;
    upstreamErrors[key] = (upstreamErrors[key] ?? 0) + 1;
  }
  dirty = true;
}

/** A bucket call of this Worker was tried again (set as the Worker's retry counter: src/batches/worker/entry.ts). */
export function countStorageRetry(op: string): void {
  storageRetries[op] = (storageRetries[op] ?? 0) + 1;
  dirty = true;
}

/** The counts since the last call (then zero), or undefined if nothing was counted. */
export function takeWorkerMetrics(): WorkerMetricsDelta | undefined {
  if (!dirty) return undefined;
  const delta: WorkerMetricsDelta = { lines: Object.fromEntries(lines), upstreamRequests, upstreamErrors, retries, storageRetries };
  lines = new Map();
  lastModel = null;
  upstreamRequests = {};
  upstreamErrors = {};
  retries = {};
  storageRetries = {};
  dirty = false;
  return delta;
}

// offpeak's metrics, in one process-wide registry (like prom-client's default
// registry). Counters are updated where things happen: the request observer
// (HTTP), the batch runner (line counts reported by Workers), the upstream
// client (interactive errors). Gauges that mirror state (queues, stored
// bytes, batches by status) are read at scrape time in ./routes.ts.
import { setRetryCounter, type StorageOp } from "../storage/retry";
import { Registry } from "./registry";
import { upstreamReason, type WorkerMetricsDelta } from "./worker";

export const registry = new Registry();

/** Seconds; from sub-millisecond routing answers to long uploads. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120];

export const m = {
  buildInfo: registry.gauge("offpeak_build_info", "Always 1; the version is in the label.", ["version"]),
  startTime: registry.gauge("offpeak_process_start_time_seconds", "Unix time the server started."),
  httpRequests: registry.counter("offpeak_http_requests_total", "HTTP requests answered, by method, route pattern and status.", ["method", "route", "status"]),
  httpDuration: registry.histogram(
    "offpeak_http_request_duration_seconds",
    "Time from receiving a request to its response headers (a streamed body may take longer), by method and route pattern.",
    ["method", "route"],
    LATENCY_BUCKETS,
  ),
  frontRequests: registry.counter(
    "offpeak_http_front_requests_total",
    "Chat completions answered by a front thread (server.http_threads; every other request they relay to the main thread), by thread.",
    ["thread"],
  ),
  dbQueries: registry.counter(
    "offpeak_db_queries_total",
    "Statements sent to the database by the query builder, by database (sqlite, postgres): the interactive hot path sends none for a known key (docs/CONTRACT.md §14).",
    ["database"],
  ),
  batchLinesProcessed: registry.counter("offpeak_batch_lines_processed_total", "Batch request lines that got a result (output or error line), by model.", ["model"]),
  batchLinesFailed: registry.counter("offpeak_batch_lines_failed_total", "Batch request lines that ended in the error file, by model.", ["model"]),
  batches: registry.gauge("offpeak_batches", "Batches in the database, by status.", ["status"]),
  peakHours: registry.gauge("offpeak_peak_hours", "1 during batches.peak_hours (docs/CONTRACT.md §18 off-peak hours), else 0."),
  batchShare: registry.gauge("offpeak_batch_share", "The share of a model's concurrency that batches with a window of 24h or more may use now (batches.peak_share in peak hours, else 1)."),
  modelInFlight: registry.gauge("offpeak_model_in_flight", "Requests holding a scheduler slot, by model and priority (interactive, batch).", ["model", "priority"]),
  modelQueueDepth: registry.gauge("offpeak_model_queue_depth", "Requests waiting for a scheduler slot, by model and priority (interactive, batch).", ["model", "priority"]),
  modelConcurrencyLimit: registry.gauge(
    "offpeak_model_concurrency_limit",
    'Requests the model may have in flight at once on this node: max_concurrency (this node\'s share on a cluster), or what the adaptive controller found for "auto"; absent for unlimited models.',
    ["model"],
  ),
  modelLatency: registry.gauge(
    "offpeak_model_latency_seconds",
    'Mean time a slot was held per answered request in the adaptive controller\'s last window, by model ("auto" models only).',
    ["model"],
  ),
  modelLatencyFloor: registry.gauge(
    "offpeak_model_latency_floor_seconds",
    'The adaptive controller\'s latency floor (the least window mean it saw lately, refreshed by probes at half the limit), by model ("auto" models only).',
    ["model"],
  ),
  modelHealthy: registry.gauge("offpeak_model_healthy", "1 if the model's upstream answered its last health check (built-ins: always 1).", ["model"]),
  upstreamRequests: registry.counter("offpeak_upstream_requests_total", "Requests sent to upstream engines (each retry counts), by model and source (interactive, batch).", ["model", "source"]),
  upstreamErrors: registry.counter(
    "offpeak_upstream_errors_total",
    "Upstream attempts without a 2xx answer, by model, source and reason (timeout, connection, http_408, http_429, http_4xx, http_5xx).",
    ["model", "source", "reason"],
  ),
  upstreamRetries: registry.counter("offpeak_upstream_retries_total", "Upstream attempts that were retries of a batch request, by model.", ["model"]),
  upstreamUp: registry.gauge("offpeak_upstream_up", "1 while the upstream is up, 0 while it is down (docs/CONTRACT.md §11), by upstream name.", ["upstream"]),
  upstreamStateChanges: registry.counter("offpeak_upstream_state_changes_total", "Changes of an upstream's health state, by upstream and new state (up, down).", ["upstream", "to"]),
  upstreamBatchWindow: registry.gauge(
    "offpeak_upstream_batch_window",
    "Batch requests allowed in flight at once to the upstream after 429s (additive increase, multiplicative decrease); absent while not limited.",
    ["upstream"],
  ),
  // Per replica of an upstream (docs/CONTRACT.md §21), read at scrape time from what GET /upstreams shows (src/upstreams/service.ts).
  replicaInFlight: registry.gauge("offpeak_replica_in_flight", "Requests in flight on the replica now (interactive and batch, from every thread), by upstream and replica id.", ["upstream", "replica"]),
  replicaRequests: registry.counter("offpeak_replica_requests_total", "Requests sent to the replica (each retry counts), by upstream and replica id.", ["upstream", "replica"]),
  replicaFailures: registry.counter(
    "offpeak_replica_failures_total",
    "Requests on the replica that failed as a whole (no connection, a timeout, 502/503/504), by upstream and replica id.",
    ["upstream", "replica"],
  ),
  replicaConcurrencyLimit: registry.gauge(
    "offpeak_replica_concurrency_limit",
    "Requests the replica may have in flight at once: its max_concurrency, else its share of its model's limit now; absent when unlimited. By upstream and replica id.",
    ["upstream", "replica"],
  ),
  replicaUp: registry.gauge("offpeak_replica_up", "1 while the replica takes requests or could (a draining one included), 0 while it is down (its breaker open or its upstream down), by upstream and replica id.", ["upstream", "replica"]),
  batchDispatchConcurrency: registry.gauge("offpeak_batch_dispatch_concurrency", "Batch requests in flight to the model now (its batch dispatch concurrency), by model.", ["model"]),
  filesStored: registry.gauge("offpeak_files_stored", "Files in the database (including batch outputs), by purpose.", ["purpose"]),
  fileBytesStored: registry.gauge("offpeak_file_bytes_stored", "Bytes of stored files, by purpose.", ["purpose"]),
  storageFreeBytes: registry.gauge("offpeak_storage_free_bytes", "Free bytes on the data directory's filesystem."),
  storageRetries: registry.counter(
    "offpeak_storage_retries_total",
    "Bucket calls tried again after a failure worth retrying (500 InternalError, 503 SlowDown, a reset, a timeout), by operation; batch Workers' included (src/storage/retry.ts).",
    ["op"],
  ),
  eventLoopDelay: registry.histogram(
    "offpeak_event_loop_delay_seconds",
    "How late the main thread's 10 ms timer ticks: time the event loop was held by one piece of work (src/metrics/eventLoop.ts).",
    [],
    [0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  ),
  eventLoopDelayMax: registry.gauge("offpeak_event_loop_delay_max_seconds", "The largest event-loop delay since the process started."),
};

m.startTime.set([], Math.floor(Date.now() / 1000));

// Bucket calls retried on this thread (Workers send theirs with their messages: applyWorkerMetrics).
setRetryCounter((op: StorageOp) => m.storageRetries.inc([op]));

/** Bound counters of interactive upstream calls, by model (a bounded set: configured models). */
const interactiveCalls = new Map<string, () => void>();
/** For interactive upstream calls (main thread). */
export function countUpstreamRequest(model: string): void {
  let count = interactiveCalls.get(model);
  if (!count) interactiveCalls.set(model, (count = m.upstreamRequests.bind([model, "interactive"])));
  count();
}
export function countUpstreamError(model: string, status: number | "timeout" | "connection"): void {
  m.upstreamErrors.inc([model, "interactive", upstreamReason(status)]);
}

/** Adds what a batch Worker counted since its last message. */
export function applyWorkerMetrics(d: WorkerMetricsDelta): void {
  for (const model in d.lines) {
    const [processed, failed] = d.lines[model]!;
    m.batchLinesProcessed.inc([model], processed);
    m.batchLinesFailed.inc([model], failed); // also when 0: the series exists for rate()
  }
  for (const model in d.upstreamRequests) m.upstreamRequests.inc([model, "batch"], d.upstreamRequests[model]);
  for (const model in d.retries) m.upstreamRetries.inc([model], d.retries[model]);
  for (const op in d.storageRetries) m.storageRetries.inc([op], d.storageRetries[op]);
  for (const key in d.upstreamErrors) {
    const tab = key.indexOf("\t");
    m.upstreamErrors.inc([key.slice(0, tab), "batch", key.slice(tab + 1)], d.upstreamErrors[key]);
  }
}

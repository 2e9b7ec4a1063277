// The one fake engine of the tests and benchmarks (docs/CONTRACT.md §21, one
// model on many engines): N OpenAI-compatible HTTP servers on loopback, each
// a model of one continuous-batching engine (vLLM-like; the batch, its
// waiting queue by priority, its prefix cache and its /metrics are
// ./engineBatch.ts), or, with a fixed-latency shape, a plain upstream that
// answers after a latency (./fakeUpstream.ts starts one so for the tests of
// the pass-through and the batches).
//
// Answers (./engineAnswers.ts). `GET /v1/models` and `/v1/models/{id}`;
// `POST /v1/chat/completions`, `/v1/completions`, `/v1/responses` (plain, or
// streamed with `stream: true`) and `/v1/embeddings`; routes answer with and
// without /v1. The answer echoes the request's content (its last user
// message, prompt or input). The replica is named by the header `x-replica:
// <index>` and by `system_fingerprint: "replica-<index>"`; with `requestIds`,
// every answer has an `x-request-id` of its own. Also `x-prefix-cache:
// hit|miss` and `x-work-ms` (the computed work) on each plain answer (not
// with a fixed latency, which has no cache), for tests. A streamed answer's
// head leaves at once on a modelled engine (vLLM starts its stream before
// the first token), with the rest of the answer on a fixed latency. A model
// the replica does not serve: 404, as vLLM answers. `GET /metrics` in vLLM's
// names; `GET /health`.
//
// Knobs, to change between tests: `models`, `latencyMs` (a fixed-latency
// replica's latency, ms, or a function of the content; it starts at
// decodeMs), `plan` (a fault plan, ./engineFaults.ts, consulted before the
// answer's first byte) and `hang` (while true, every request, probes too, is
// accepted, counted and never answered, until kill() or stop() drops it).
//
// Counting. stats() counts requests received (whichever the model), seen
// (for a model it serves), answered, failed by the plan, and GET /v1/models
// probes. With `countContents`, contents() counts every request by its
// content, so a test or benchmark can tell lines sent twice (and a plan
// sees the attempt number); with `arrivals`, arrivals() keeps the Date.now()
// of every POST and probe as it arrives (before its body is read), for
// rates over time.
//
// Faults. kill() stops the server at once and drops its open connections (a
// client sees a reset, as from a dead process); what ran or waited is lost
// and counted. restart() listens again on the same port with an empty cache,
// the same knobs and the same counters. pause()/resume() freeze the engine's
// progress (for tests that must line up a queue before anything finishes).
//
// As a process of its own (a benchmark's engine): ./engineCli.ts.
import { answerBody, answerId, contentOf, streamAnswer, type ChatBody } from "./engineAnswers";
import { engineBatch, type Admission, type ReplicaStats } from "./engineBatch";
import { isFixedLatency, prefixOf, replicaShape, type ReplicaShape } from "./engineShape";
import { errorBody, failureResponse, type FailPlan } from "./engineFaults";

export { fixedLatencyShape, isFixedLatency, prefixOf, replicaShape, replicaThroughput, workOf, DEFAULT_REPLICA_SHAPE, type PrefixOf, type ReplicaShape } from "./engineShape";
export type { Admission, ReplicaStats } from "./engineBatch";
export { inputOf, promptOf, type ChatBody } from "./engineAnswers";

export interface EngineReplica {
  index: number;
  port: number;
  /** http://127.0.0.1:PORT/v1: a replica's base_url. */
  baseUrl: string;
  shape: ReplicaShape;
  /** Knobs (see the top). */
  models: string[];
  latencyMs: number | ((content: string) => number);
  plan: FailPlan | null;
  hang: boolean;
  readonly up: boolean;
  stats(): ReplicaStats;
  /** The last (at most 10,000) requests to start running, in the order they started. */
  admissions(): Admission[];
  /** The cached prefixes' keys (model, NUL, prefix text), least recently used first. */
  cacheKeys(): string[];
  /** The /metrics text. */
  metricsText(): string;
  /** Requests received by content, with `countContents`; since the start or the last reset (one Map, cleared by reset). */
  contents(): Map<string, number>;
  /** Date.now() at each POST and each GET /v1/models as it arrived, with `arrivals`; since the start or the last reset. */
  arrivals(): { posts: number[]; probes: number[] };
  /** Zeroes the counters; empties the cache too unless keepCache. */
  reset(opts?: { keepCache?: boolean }): void;
  /** Freezes the engine: nothing progresses (requests still arrive, start and queue). */
  pause(): void;
  resume(): void;
  /** Stops listening at once, dropping open connections (hung requests too); returns how many requests it held. */
  kill(): Promise<number>;
  /** Listens again on the same port, cache empty. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export interface ReplicaOptions {
  index?: number;
  port?: number;
  models?: string[];
  /** Seconds a kept-alive connection may idle before the server closes it (Bun's default: 10). */
  idleTimeout?: number;
  /** Count requests by content (contents()). */
  countContents?: boolean;
  /** Keep every request's arrival time (arrivals()). */
  arrivals?: boolean;
  /** Give every answer an x-request-id of its own (req_fake_…), as OpenAI's API does. */
  requestIds?: boolean;
}

const ANSWERED = new Set(["/chat/completions", "/completions", "/responses", "/embeddings"]);

function errorJson(status: number, message: string, type: string, extra: Record<string, unknown> = {}): Response {
  return Response.json({ error: { message, type, param: null, code: null, ...extra } }, { status });
}

export async function startEngineReplica(shapeIn: Partial<ReplicaShape> = {}, opts: ReplicaOptions = {}): Promise<EngineReplica> {
  const shape = replicaShape(shapeIn);
  const fixed = isFixedLatency(shape);
  const index = opts.index ?? 0;
  const initialModels = opts.models ?? ["engine-chat"];
  const batch = engineBatch(shape, `{model_name="${initialModels[0]}"}`);
  const s = batch.counters;
  let up = true;
  const contents = new Map<string, number>();
  const postTimes: number[] = [];
  const probeTimes: number[] = [];
  /** Requests held by `hang`: answered (into a dropped connection) when the listener goes down. */
  const hung = new Set<() => void>();
  const fingerprint = `replica-${index}`;
  /** Every answer names its replica; one object for all unless each has its own request id, as the zero-latency benchmarks answer tens of thousands a second. */
  const replicaHeader: Record<string, string> = { "x-replica": String(index) };
  const headersOf = (): Record<string, string> => (opts.requestIds ? { ...replicaHeader, "x-request-id": answerId("req_fake_") } : replicaHeader);
  const modelEntry = (id: string) => ({ id, object: "model", created: 0, owned_by: "engine-replica", max_model_len: 32768 });

  const hold = () =>
    new Promise<Response>((resolve) => {
      const answer = () => {
        hung.delete(answer);
        resolve(Response.json(errorBody(503), { status: 503 }));
      };
      hung.add(answer);
    });

  async function handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname.replace(/^\/v1(?=\/)/, "");
    if (req.method === "GET" && (path === "/models" || path.startsWith("/models/"))) {
      s.probes++;
      if (opts.arrivals) probeTimes.push(Date.now());
      if (replica.hang) return hold();
      if (path === "/models") return Response.json({ object: "list", data: replica.models.map(modelEntry) });
      const id = decodeURIComponent(path.slice("/models/".length));
      return replica.models.includes(id) ? Response.json(modelEntry(id)) : errorJson(404, `The model '${id}' does not exist`, "invalid_request_error", { code: "model_not_found" });
    }
    if (req.method === "GET" && path === "/metrics") return new Response(batch.metricsText(), { headers: { "content-type": "text/plain; version=0.0.4" } });
    if (req.method === "GET" && path === "/health") return new Response("");
    if (req.method !== "POST" || !ANSWERED.has(path)) return errorJson(404, "not found", "invalid_request_error");
    if (opts.arrivals) postTimes.push(Date.now());
    let body: ChatBody;
    try {
      body = (await req.json()) as ChatBody;
    } catch {
      return errorJson(400, "bad JSON", "invalid_request_error");
    }
    if (body === null || typeof body !== "object") return errorJson(400, "the body must be a JSON object", "invalid_request_error");
    const content = contentOf(path, body);
    s.received++;
    let attempt = 1;
    if (opts.countContents) contents.set(content, (attempt = (contents.get(content) ?? 0) + 1));
    if (replica.hang) return hold();
    // A body without a model is not turned away (a test's hand-made request).
    if (body.model !== undefined && !replica.models.includes(String(body.model)))
      return errorJson(404, `The model '${String(body.model)}' does not exist`, "invalid_request_error", { param: "model", code: "model_not_found" });
    const priority = typeof body.priority === "number" && Number.isFinite(body.priority) ? body.priority : 0;
    s.seen++;
    s.byPriority[String(priority)] = (s.byPriority[String(priority)] ?? 0) + 1;
    if (batch.full()) {
      s.rejected++;
      return errorJson(503, "engine overloaded: too many requests held", "server_error");
    }
    const failure = () => {
      const f = replica.plan?.({ path, content, attempt, body: body as Record<string, unknown> });
      if (f) s.failed++;
      return f ? failureResponse(f, headersOf()) : null;
    };
    // A modelled engine starts a stream before its work is done: the plan has its say first.
    const streamed = body.stream === true && path !== "/embeddings";
    const headFirst = streamed && !fixed;
    if (headFirst) {
      const failed = failure();
      if (failed) return failed;
    }
    let r: { hit: boolean; work: number };
    let done: Promise<boolean>;
    if (fixed) {
      const ms = typeof replica.latencyMs === "function" ? replica.latencyMs(content) : replica.latencyMs;
      r = { hit: false, work: ms };
      done = batch.runFixed(ms);
    } else ({ held: r, done } = batch.enqueue(priority, prefixOf(body, shape)));
    const answered = () => void s.answered++;
    if (headFirst) return streamAnswer(path, body, content, fingerprint, done, headersOf(), answered);
    if (!(await done)) return errorJson(500, "engine killed", "server_error");
    const failed = failure();
    if (failed) return failed;
    if (streamed) return streamAnswer(path, body, content, fingerprint, done, headersOf(), answered);
    answered();
    const headers = fixed ? headersOf() : { ...headersOf(), "x-prefix-cache": r.hit ? "hit" : "miss", "x-work-ms": String(r.work) };
    return Response.json(answerBody(path, body, content, fingerprint), { headers });
  }

  const serve = (port: number) => Bun.serve({ port, hostname: "127.0.0.1", idleTimeout: opts.idleTimeout, fetch: handle });
  let server = serve(opts.port ?? 0);
  const port = server.port!;

  /** Closes the listener and every open connection; what was held ends unanswered. Returns how many requests the engine held. */
  async function down(): Promise<number> {
    up = false;
    // Connections first, so that no answer of a dropped request slips out.
    const stopped = server.stop(true);
    const held = batch.dropAll();
    for (const answer of [...hung]) answer();
    await stopped;
    return held;
  }

  const replica: EngineReplica = {
    index,
    port,
    baseUrl: `http://127.0.0.1:${port}/v1`,
    shape,
    models: initialModels,
    latencyMs: shape.decodeMs,
    plan: null,
    hang: false,
    get up() {
      return up;
    },
    stats: () => batch.stats(index, up),
    admissions: batch.admissions,
    cacheKeys: batch.cacheKeys,
    metricsText: batch.metricsText,
    contents: () => contents,
    arrivals: () => ({ posts: postTimes, probes: probeTimes }),
    reset(o = {}) {
      batch.reset(o.keepCache === true);
      contents.clear();
      postTimes.length = 0;
      probeTimes.length = 0;
    },
    pause: () => batch.pause(true),
    resume: () => batch.pause(false),
    async kill() {
      if (!up) return 0;
      const held = await down();
      s.dropped += held;
      s.kills.push(held);
      batch.clearCache();
      return held;
    },
    async restart() {
      if (up) return;
      batch.clearCache();
      batch.restartClock();
      for (let i = 0; ; i++) {
        try {
          server = serve(port);
          break;
        } catch (e) {
          // The port may linger a moment after the old listener closed.
          if (i >= 50) throw e;
          await Bun.sleep(20);
        }
      }
      up = true;
    },
    async stop() {
      await down();
    },
  };
  return replica;
}

export interface EngineReplicas {
  replicas: EngineReplica[];
  /** Each replica's base_url (http://127.0.0.1:PORT/v1), in index order. */
  baseUrls: string[];
  shape: ReplicaShape;
  stats(): ReplicaStats[];
  /** The sums over the replicas (index -1; up: any is up; peakInFlight: the largest). */
  total(): ReplicaStats;
  reset(opts?: { keepCache?: boolean }): void;
  stop(): Promise<void>;
}

/** Sums replicas' stats (index -1; `up` if any is up; `peakInFlight` the largest of theirs; `kills` all, in replica order). */
export function sumStats(all: ReplicaStats[]): ReplicaStats {
  const t: ReplicaStats = { index: -1, up: false, received: 0, seen: 0, answered: 0, failed: 0, preempted: 0, rejected: 0, probes: 0, inFlight: 0, running: 0, waiting: 0, peakInFlight: 0, hits: 0, misses: 0, byPriority: {}, workMs: 0, dropped: 0, kills: [], busyMs: 0, pastCliffMs: 0, elapsedMs: 0 };
  for (const s of all) {
    t.up ||= s.up;
    for (const k of ["received", "seen", "answered", "failed", "preempted", "rejected", "probes", "inFlight", "running", "waiting", "hits", "misses", "workMs", "dropped", "busyMs", "pastCliffMs"] as const) t[k] += s[k];
    t.peakInFlight = Math.max(t.peakInFlight, s.peakInFlight);
    t.elapsedMs = Math.max(t.elapsedMs, s.elapsedMs);
    t.kills.push(...s.kills);
    for (const [p, n] of Object.entries(s.byPriority)) t.byPriority[p] = (t.byPriority[p] ?? 0) + n;
  }
  return t;
}

/** Starts `n` replicas of one model, each on its own loopback port, indexes 0 … n − 1. */
export async function startEngineReplicas(n: number, shape: Partial<ReplicaShape> = {}, opts: Omit<ReplicaOptions, "index" | "port"> & { ports?: number[] } = {}): Promise<EngineReplicas> {
  const replicas: EngineReplica[] = [];
  const { ports, ...each } = opts;
  for (let i = 0; i < n; i++) replicas.push(await startEngineReplica(shape, { ...each, index: i, port: ports?.[i] }));
  return {
    replicas,
    baseUrls: replicas.map((r) => r.baseUrl),
    shape: replicaShape(shape),
    stats: () => replicas.map((r) => r.stats()),
    total: () => sumStats(replicas.map((r) => r.stats())),
    reset: (o) => replicas.forEach((r) => r.reset(o)),
    stop: async () => {
      await Promise.all(replicas.map((r) => r.stop()));
    },
  };
}

// Engine replicas for tests and benchmarks (docs/CONTRACT.md §21, one model on
// many engines): N OpenAI-compatible HTTP servers on loopback, each a model
// of one continuous-batching engine (vLLM-like) with a batch of at most
// `maxRunning` requests, a waiting queue ordered by priority, and a prefix
// cache. Deterministic: what a request costs is computed from its body and
// the replica's cache, never measured.
//
// Running. At most `maxRunning` requests run at once; they share the engine
// as in ./engineModel.ts (processor sharing: with n running, each progresses
// at speedAt(n) of its speed alone; knee and cliff default to maxRunning, so
// throughput rises almost in proportion up to a full batch and stays flat).
// The others wait in a queue ordered by the body's `priority` (a number,
// default 0; lower first, first come first served within one priority: vLLM's
// `--scheduling-policy priority`). With `preempt`, as vLLM's priority policy
// does, a request that arrives to a full batch with a lower priority value
// than a running one preempts the running one with the highest value (the
// latest among equals): that one goes back to the waiting queue in its
// place and starts over (recomputed) when it runs again. From `maxQueued`
// requests held (running + waiting; default no bound), a new one is answered
// 503 at once.
//
// Work. A request's work, in ms of running alone:
//
//   decodeMs + prefillMsPerKChar · (restChars + prefixChars · (hit ? 1 − hitSaving : 1)) / 1000
//
// Its prompt is the text of its messages (each message's string content, or
// its text parts, joined by "\n"; `prompt` for /completions). Its prefix is
// the content of its first message when that is a system message, otherwise
// the first `prefixChars` (default 1000) characters of its prompt; the rest
// of the prompt (`restChars`) is never cached. The prefix's cache key is the
// model and the prefix text. With the defaults (100 ms of decode, 200 ms per
// 1000 prompt characters, 90% saved on a hit) a request with a 4,000-character
// system prompt needs 900 ms of work on a miss and 180 ms on a hit: prefill
// dominates, as it does on a real engine for long shared prompts.
//
// Prefix cache. An LRU of `cachePrefixes` (default 4) prefixes. A request's
// prefix is looked up when it starts running (a hit refreshes the entry);
// on a miss the prefix enters the cache when the request's prefill is done
// (its work left falls to decodeMs) or, at the latest, when it is answered,
// evicting the least recently used prefix. Two requests with the same new
// prefix that start together both miss, as on a real engine.
//
// Metrics. `GET /metrics` in vLLM's names, labelled {model_name="<first
// model>"}: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:gpu_cache_usage_perc and vllm:kv_cache_usage_perc (the same figure,
// 0–1: running / maxRunning), vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (in tokens, as vLLM counts them: a token is 4
// characters; queries count every prompt token of a request that started,
// hits the prefix tokens of those that hit). stats() counts requests.
//
// Answers. `GET /v1/models`; `POST /v1/chat/completions` (and
// /v1/completions), plain or streamed (`stream: true`: the headers and the
// role chunk at once, the content when the work is done). The content is the
// last message's text (the prompt for /completions) whichever replica
// answers; the replica is named by the header `x-replica: <index>` and by
// `system_fingerprint: "replica-<index>"`. Also `x-prefix-cache: hit|miss`
// and `x-work-ms` (the computed work) on each answer, for tests. A model the
// replica does not serve: 404, as vLLM answers.
//
// Faults. kill() stops the server at once and drops its open connections (a
// client sees a reset, as from a dead process); what ran or waited is lost
// and counted. restart() listens again on the same port with an empty cache.
// pause()/resume() freeze the engine's progress (for tests that must line up
// a queue before anything finishes).
import { speedAt, type EngineShape } from "./engineModel";

export interface ReplicaShape {
  /** Decode work of every request, ms of running alone (default 100). */
  decodeMs: number;
  /** Prefill work per 1000 prompt characters, ms of running alone (default 200). */
  prefillMsPerKChar: number;
  /** Share of the prefix's prefill a cache hit saves (default 0.9). */
  hitSaving: number;
  /** Requests running at once: the engine's batch (default 16). */
  maxRunning: number;
  /** Prefixes in each replica's cache (default 4). */
  cachePrefixes: number;
  /** A prompt without a system message: its first this many characters are its prefix (default 1000). */
  prefixChars: number;
  /** From this many requests held (running + waiting), a new one gets 503 at once (default Infinity). */
  maxQueued: number;
  /** A request with a lower priority value preempts a running one when the batch is full (default false). */
  preempt: boolean;
  /** Running requests where the speed stops rising gently (default maxRunning); see ./engineModel.ts. */
  knee?: number;
  /** Running requests past which throughput falls (default maxRunning: never, as running is capped there). */
  cliff?: number;
  /** Latency at the knee is (1 + slope) × alone (default 0.1). */
  slope?: number;
  /** How fast throughput falls past the cliff (default 1). */
  fall?: number;
}

export const DEFAULT_REPLICA_SHAPE: ReplicaShape = {
  decodeMs: 100,
  prefillMsPerKChar: 200,
  hitSaving: 0.9,
  maxRunning: 16,
  cachePrefixes: 4,
  prefixChars: 1000,
  maxQueued: Infinity,
  preempt: false,
};

/** The shape with every default filled in. */
export function replicaShape(s: Partial<ReplicaShape> = {}): ReplicaShape {
  return { ...DEFAULT_REPLICA_SHAPE, ...s };
}

/** The ./engineModel.ts shape whose speedAt() the running requests share. */
function speedShape(s: ReplicaShape): EngineShape {
  return { unloadedMs: 0, knee: s.knee ?? s.maxRunning, cliff: s.cliff ?? s.maxRunning, failAt: Infinity, slope: s.slope, fall: s.fall };
}

/** Answers per second of a replica that always has a full batch of requests of `workMs` each. */
export function replicaThroughput(s: ReplicaShape, workMs: number): number {
  return (s.maxRunning * speedAt(speedShape(s), s.maxRunning) * 1000) / workMs;
}

type Content = string | { type?: string; text?: string }[] | null | undefined;
export interface ChatBody {
  model?: string;
  messages?: { role?: string; content?: Content }[];
  prompt?: string | string[];
  priority?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean } | null;
  max_tokens?: number;
}

const textOf = (c: Content): string => (typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => (typeof p?.text === "string" ? p.text : "")).join("") : "");

/** A request's prompt text: its messages' text joined by "\n", or its `prompt`. */
export function promptOf(body: ChatBody): string {
  if (Array.isArray(body.messages)) return body.messages.map((m) => textOf(m?.content)).join("\n");
  return Array.isArray(body.prompt) ? body.prompt.join("\n") : typeof body.prompt === "string" ? body.prompt : "";
}

export interface PrefixOf {
  /** The cache key: model and prefix text. */
  key: string;
  prefixChars: number;
  /** Prompt characters after the prefix (never cached). */
  restChars: number;
}

/** A request's prefix: its system message, or the first `prefixChars` characters of its prompt. */
export function prefixOf(body: ChatBody, shape: Pick<ReplicaShape, "prefixChars">): PrefixOf {
  const model = String(body.model ?? "");
  const prompt = promptOf(body);
  const first = Array.isArray(body.messages) ? body.messages[0] : undefined;
  const prefix = first?.role === "system" ? textOf(first.content) : prompt.slice(0, shape.prefixChars);
  return { key: `${model}\u0000${prefix}`, prefixChars: prefix.length, restChars: Math.max(0, prompt.length - prefix.length) };
}

/** A request's work in ms of running alone, with its prefix cached (`hit`) or not. */
export function workOf(shape: ReplicaShape, p: Pick<PrefixOf, "prefixChars" | "restChars">, hit: boolean): number {
  return shape.decodeMs + (shape.prefillMsPerKChar * (p.restChars + p.prefixChars * (hit ? 1 - shape.hitSaving : 1))) / 1000;
}

const tokens = (chars: number) => Math.ceil(chars / 4);

export interface ReplicaStats {
  index: number;
  /** Listening (not killed). */
  up: boolean;
  /** Requests received (every POST that reached the engine, answered or not). */
  seen: number;
  /** Requests answered 200 (their whole answer handed to the connection). */
  answered: number;
  /** Requests preempted (taken out of the batch for one of a lower priority value; `preempt`). */
  preempted: number;
  /** Requests answered 503 (maxQueued). */
  rejected: number;
  /** Requests running and waiting now. */
  inFlight: number;
  running: number;
  waiting: number;
  /** The most held at once (running + waiting). */
  peakInFlight: number;
  /** Prefix cache, in requests: hits and misses among those that started running. */
  hits: number;
  misses: number;
  /** Requests received, by their `priority` ("0" when the body has none). */
  byPriority: Record<string, number>;
  /** Work of the requests that started running, ms of running alone. */
  workMs: number;
  /** Requests lost to kill(): running or waiting when it was killed. */
  dropped: number;
  /** Held (running + waiting) at each kill, in order. */
  kills: number[];
  /** Time with at least one request running, ms. */
  busyMs: number;
  /** Since the start or the last reset, ms. */
  elapsedMs: number;
}

export interface Admission {
  /** Order of arrival at this replica since the start (1, 2, …). */
  seq: number;
  priority: number;
  hit: boolean;
  workMs: number;
  /** The prefix's cache key (model, NUL, prefix text). */
  key: string;
  /** performance.now() when it started running. */
  at: number;
}

export interface EngineReplica {
  index: number;
  port: number;
  /** http://127.0.0.1:PORT/v1: a replica's base_url. */
  baseUrl: string;
  shape: ReplicaShape;
  models: string[];
  readonly up: boolean;
  stats(): ReplicaStats;
  /** The last (at most 10,000) requests to start running, in the order they started. */
  admissions(): Admission[];
  /** The cached prefixes' keys (model, NUL, prefix text), least recently used first. */
  cacheKeys(): string[];
  /** The /metrics text. */
  metricsText(): string;
  /** Zeroes the counters; empties the cache too unless keepCache. */
  reset(opts?: { keepCache?: boolean }): void;
  /** Freezes the engine: nothing progresses (requests still arrive, start and queue). */
  pause(): void;
  resume(): void;
  /** Stops listening at once, dropping open connections; returns how many requests it held. */
  kill(): Promise<number>;
  /** Listens again on the same port, cache empty. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

interface Held {
  seq: number;
  priority: number;
  prefix: PrefixOf;
  /** Work left, ms of running alone (set when it starts). */
  left: number;
  /** Its prefix is in the cache (a hit, or its prefill is done). */
  cached: boolean;
  hit: boolean;
  work: number;
  done: (ok: boolean) => void;
}

const MAX_ADMISSIONS = 10_000;

function errorJson(status: number, message: string, type: string): Response {
  return Response.json({ error: { message, type, param: null, code: null } }, { status });
}

export async function startEngineReplica(
  shapeIn: Partial<ReplicaShape> = {},
  opts: { index?: number; port?: number; models?: string[] } = {},
): Promise<EngineReplica> {
  const shape = replicaShape(shapeIn);
  const speed = speedShape(shape);
  const index = opts.index ?? 0;
  const models = opts.models ?? ["engine-chat"];
  const label = `{model_name="${models[0]}"}`;
  const running: Held[] = [];
  /** Ordered by (priority, seq). */
  const waiting: Held[] = [];
  /** Insertion order is recency: the first key is the least recently used. */
  const cache = new Map<string, true>();
  let admitted: Admission[] = [];
  let seq = 0;
  let completions = 0;
  let paused = false;
  let up = true;
  let last = performance.now();
  let timer: ReturnType<typeof setTimeout> | null = null;
  const fresh = () => ({
    seen: 0,
    answered: 0,
    preempted: 0,
    rejected: 0,
    peakInFlight: running.length + waiting.length,
    hits: 0,
    misses: 0,
    byPriority: {} as Record<string, number>,
    workMs: 0,
    dropped: 0,
    kills: [] as number[],
    busyMs: 0,
    since: performance.now(),
    queryTokens: 0,
    hitTokens: 0,
  });
  let s = fresh();
  // vLLM's counters only grow: /metrics never sees reset().
  let queryTokens = 0;
  let hitTokens = 0;

  function touch(key: string): void {
    cache.delete(key);
    cache.set(key, true);
    while (cache.size > shape.cachePrefixes) cache.delete(cache.keys().next().value!);
  }

  function advance(now: number): void {
    const dt = now - last;
    last = now;
    const n = running.length;
    if (dt <= 0 || n === 0 || paused) return;
    const step = dt * speedAt(speed, n);
    s.busyMs += dt;
    for (const r of running) {
      r.left -= step;
      if (!r.cached && r.left <= shape.decodeMs) {
        r.cached = true;
        touch(r.prefix.key);
      }
    }
  }

  function admit(): void {
    while (running.length < shape.maxRunning && waiting.length > 0) {
      const r = waiting.shift()!;
      const hit = cache.has(r.prefix.key);
      if (hit) touch(r.prefix.key);
      r.hit = r.cached = hit;
      r.work = r.left = workOf(shape, r.prefix, hit);
      const promptTokens = tokens(r.prefix.prefixChars + r.prefix.restChars);
      queryTokens += promptTokens;
      if (hit) {
        s.hits++;
        hitTokens += tokens(r.prefix.prefixChars);
      } else s.misses++;
      s.workMs += r.work;
      running.push(r);
      admitted.push({ seq: r.seq, priority: r.priority, hit, workMs: r.work, key: r.prefix.key, at: performance.now() });
      if (admitted.length > 2 * MAX_ADMISSIONS) admitted = admitted.slice(-MAX_ADMISSIONS);
    }
  }

  function schedule(): void {
    if (timer) clearTimeout(timer);
    timer = null;
    if (running.length === 0 || paused) return;
    let least = Infinity;
    for (const r of running) least = Math.min(least, r.left);
    timer = setTimeout(finishDue, Math.max(0, least / speedAt(speed, running.length)));
  }

  function finishDue(): void {
    timer = null;
    advance(performance.now());
    // Timers fire on whole milliseconds: what is within a few microseconds of done is done.
    for (let i = 0; i < running.length; )
      if (running[i]!.left <= 0.005) {
        const [r] = running.splice(i, 1);
        if (!r!.cached) touch(r!.prefix.key);
        r!.done(true);
      } else i++;
    admit();
    schedule();
  }

  /** Puts a request in the waiting queue, ordered by (priority, arrival). */
  function wait(r: Held): void {
    let lo = 0;
    let hi = waiting.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const w = waiting[mid]!;
      if (w.priority < r.priority || (w.priority === r.priority && w.seq < r.seq)) lo = mid + 1;
      else hi = mid;
    }
    waiting.splice(lo, 0, r);
  }

  /** Queues a request; `done` resolves true when its work is done, false if it was dropped (kill). */
  function enqueue(priority: number, prefix: PrefixOf): { held: Held; done: Promise<boolean> } {
    advance(performance.now());
    let held!: Held;
    const done = new Promise<boolean>((done) => {
      const r: Held = (held = { seq: ++seq, priority, prefix, left: 0, cached: false, hit: false, work: 0, done });
      wait(r);
      s.peakInFlight = Math.max(s.peakInFlight, running.length + waiting.length);
      if (shape.preempt && running.length >= shape.maxRunning) {
        let victim = -1;
        for (let i = 0; i < running.length; i++) {
          const x = running[i]!;
          if (x.priority > priority && (victim < 0 || x.priority > running[victim]!.priority || (x.priority === running[victim]!.priority && x.seq > running[victim]!.seq))) victim = i;
        }
        if (victim >= 0) {
          const [v] = running.splice(victim, 1);
          s.preempted++;
          wait(v!);
        }
      }
      admit();
      schedule();
    });
    return { held, done };
  }

  const list = { object: "list", data: models.map((id) => ({ id, object: "model", created: 0, owned_by: "engine-replica", max_model_len: 32768 })) };
  const enc = new TextEncoder();

  async function handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname.replace(/^\/v1/, "");
    if (req.method === "GET" && path === "/models") return Response.json(list);
    if (req.method === "GET" && path === "/metrics") return new Response(metricsText(), { headers: { "content-type": "text/plain; version=0.0.4" } });
    if (req.method === "GET" && path === "/health") return new Response("");
    const chat = path === "/chat/completions";
    if (req.method !== "POST" || (!chat && path !== "/completions")) return new Response("not found", { status: 404 });
    let body: ChatBody;
    try {
      body = (await req.json()) as ChatBody;
    } catch {
      return errorJson(400, "bad JSON", "invalid_request_error");
    }
    if (body === null || typeof body !== "object") return errorJson(400, "the body must be a JSON object", "invalid_request_error");
    const model = typeof body.model === "string" ? body.model : "";
    if (!models.includes(model)) return errorJson(404, `The model \`${model}\` does not exist.`, "NotFoundError");
    const priority = typeof body.priority === "number" && Number.isFinite(body.priority) ? body.priority : 0;
    s.seen++;
    s.byPriority[String(priority)] = (s.byPriority[String(priority)] ?? 0) + 1;
    if (running.length + waiting.length >= shape.maxQueued) {
      s.rejected++;
      return errorJson(503, "engine overloaded: too many requests held", "server_error");
    }
    const prefix = prefixOf(body, shape);
    const { held: r, done } = enqueue(priority, prefix);
    const n = ++completions;
    const id = `${chat ? "chatcmpl" : "cmpl"}-r${index}-${n}`;
    const fingerprint = `replica-${index}`;
    const last = chat ? textOf(body.messages?.[body.messages.length - 1]?.content) : promptOf(body);
    const promptTokens = tokens(prefix.prefixChars + prefix.restChars);
    const usage = { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 };
    // A streamed answer's headers leave before the request may have started: they name the replica alone.
    const headers = (streamed: boolean) => ({
      "x-replica": String(index),
      ...(streamed ? {} : { "x-prefix-cache": r.hit ? "hit" : "miss", "x-work-ms": String(r.work) }),
    });
    const object = chat ? "chat.completion" : "text_completion";
    if (body.stream === true) {
      // The headers at once (vLLM starts its stream before the first token); the content when the work is done.
      const chunk = (delta: Record<string, unknown>, finish: string | null) =>
        chat
          ? { id, object: "chat.completion.chunk", created: 0, model, system_fingerprint: fingerprint, choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }] }
          : { id, object: "text_completion", created: 0, model, system_fingerprint: fingerprint, choices: [{ index: 0, text: delta.content ?? "", finish_reason: finish, logprobs: null }] };
      const sse = (o: unknown) => enc.encode(`data: ${JSON.stringify(o)}\n\n`);
      const stream = new ReadableStream<Uint8Array>({
        async start(c) {
          c.enqueue(sse(chunk({ role: "assistant", content: "" }, null)));
          if (!(await done)) {
            c.error(new Error("engine killed"));
            return;
          }
          c.enqueue(sse(chunk({ content: last }, null)));
          c.enqueue(sse(chunk({}, "stop")));
          if (body.stream_options?.include_usage) c.enqueue(sse({ id, object: "chat.completion.chunk", created: 0, model, choices: [], usage }));
          c.enqueue(enc.encode("data: [DONE]\n\n"));
          s.answered++;
          c.close();
        },
      });
      return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache", ...headers(true) } });
    }
    if (!(await done)) return errorJson(500, "engine killed", "server_error");
    s.answered++;
    const choice = chat
      ? { index: 0, message: { role: "assistant", content: last }, finish_reason: "stop", logprobs: null }
      : { index: 0, text: last, finish_reason: "stop", logprobs: null };
    return Response.json({ id, object, created: 0, model, system_fingerprint: fingerprint, choices: [choice], usage }, { headers: headers(false) });
  }

  function metricsText(): string {
    advance(performance.now());
    const usage = running.length / shape.maxRunning;
    const g = (name: string, help: string, type: "gauge" | "counter", v: number) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${label} ${v}\n`;
    return (
      g("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", running.length) +
      g("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", waiting.length) +
      g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
      g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
      g("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "counter", queryTokens) +
      g("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "counter", hitTokens)
    );
  }

  const serve = (port: number) => Bun.serve({ port, hostname: "127.0.0.1", fetch: handle });
  let server = serve(opts.port ?? 0);
  const port = server.port!;

  function dropAll(): number {
    advance(performance.now());
    const all = [...running.splice(0), ...waiting.splice(0)];
    for (const r of all) r.done(false);
    if (timer) clearTimeout(timer);
    timer = null;
    return all.length;
  }

  const replica: EngineReplica = {
    index,
    port,
    baseUrl: `http://127.0.0.1:${port}/v1`,
    shape,
    models,
    get up() {
      return up;
    },
    stats() {
      advance(performance.now());
      return {
        index,
        up,
        seen: s.seen,
        answered: s.answered,
        preempted: s.preempted,
        rejected: s.rejected,
        inFlight: running.length + waiting.length,
        running: running.length,
        waiting: waiting.length,
        peakInFlight: s.peakInFlight,
        hits: s.hits,
        misses: s.misses,
        byPriority: { ...s.byPriority },
        workMs: s.workMs,
        dropped: s.dropped,
        kills: [...s.kills],
        busyMs: s.busyMs,
        elapsedMs: performance.now() - s.since,
      };
    },
    admissions: () => admitted.slice(-MAX_ADMISSIONS),
    cacheKeys: () => [...cache.keys()],
    metricsText,
    reset(o = {}) {
      advance(performance.now());
      s = fresh();
      admitted = [];
      if (!o.keepCache) cache.clear();
    },
    pause() {
      advance(performance.now());
      paused = true;
      schedule();
    },
    resume() {
      advance(performance.now());
      paused = false;
      schedule();
    },
    async kill() {
      if (!up) return 0;
      up = false;
      // Connections first, so that no answer of a dropped request slips out.
      const stopped = server.stop(true);
      const held = dropAll();
      s.dropped += held;
      s.kills.push(held);
      cache.clear();
      await stopped;
      return held;
    },
    async restart() {
      if (up) return;
      cache.clear();
      last = performance.now();
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
      up = false;
      const stopped = server.stop(true);
      dropAll();
      await stopped;
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
  const t: ReplicaStats = { index: -1, up: false, seen: 0, answered: 0, preempted: 0, rejected: 0, inFlight: 0, running: 0, waiting: 0, peakInFlight: 0, hits: 0, misses: 0, byPriority: {}, workMs: 0, dropped: 0, kills: [], busyMs: 0, elapsedMs: 0 };
  for (const s of all) {
    t.up ||= s.up;
    for (const k of ["seen", "answered", "preempted", "rejected", "inFlight", "running", "waiting", "hits", "misses", "workMs", "dropped", "busyMs"] as const) t[k] += s[k];
    t.peakInFlight = Math.max(t.peakInFlight, s.peakInFlight);
    t.elapsedMs = Math.max(t.elapsedMs, s.elapsedMs);
    t.kills.push(...s.kills);
    for (const [p, n] of Object.entries(s.byPriority)) t.byPriority[p] = (t.byPriority[p] ?? 0) + n;
  }
  return t;
}

/** Starts `n` replicas of one model, each on its own loopback port, indexes 0 … n − 1. */
export async function startEngineReplicas(n: number, shape: Partial<ReplicaShape> = {}, opts: { models?: string[] } = {}): Promise<EngineReplicas> {
  const replicas: EngineReplica[] = [];
  for (let i = 0; i < n; i++) replicas.push(await startEngineReplica(shape, { index: i, models: opts.models }));
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

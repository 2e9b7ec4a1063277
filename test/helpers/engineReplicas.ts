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
// Fixed latency. With no batch limit and no prefill (fixedLatencyShape(ms):
// maxRunning Infinity, prefillMsPerKChar 0) every request runs at once at
// full speed, so the model reduces to a fixed latency: each request is
// answered decodeMs after it arrives (0: at once), on a timer of its own,
// with no queue and no cache (hits, misses and busyMs stay 0; pause() does
// not hold it). This is the loopback upstream of the pass-through and batch
// benchmarks, whose figures must not carry the cost of modelling a batch.
//
// Answers. `GET /v1/models`; `POST /v1/chat/completions` (and
// /v1/completions), plain or streamed (`stream: true`: the headers and the
// role chunk at once, the content when the work is done); `POST
// /v1/responses`, plain (a response object; its prompt is `instructions`,
// the prefix, and `input`). The content is the last message's text (the
// prompt for /completions, the input's text for /responses) whichever replica
// answers; the replica is named by the header `x-replica: <index>` and by
// `system_fingerprint: "replica-<index>"`. Also `x-prefix-cache: hit|miss`
// and `x-work-ms` (the computed work) on each plain answer (not with a fixed
// latency, which has no cache), for tests. A model the
// replica does not serve: 404, as vLLM answers.
//
// Counting. stats() counts requests received (`seen`), answered, and GET
// /v1/models probes. With `countContents`, contents() counts every request
// by its content as above, so a benchmark can tell lines sent twice; with
// `arrivals`, arrivals() keeps the Date.now() of every POST and probe as it
// arrives (before its body is read), for rates over time.
//
// As a process of its own (a benchmark's engine, whose CPU is then not the
// benchmark's): `bun test/helpers/engineReplicas.ts`, its options at the end
// of this file (one replica a port; a control port to kill, restart, reset
// and read them).
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

/** A fixed latency of `ms` for every request, however many are in flight (see "Fixed latency" above). */
export const fixedLatencyShape = (ms: number): Partial<ReplicaShape> => ({ decodeMs: ms, prefillMsPerKChar: 0, maxRunning: Infinity, cachePrefixes: 0 });

/** No batch limit and no prefill: the model reduces to a fixed latency of decodeMs. */
export function isFixedLatency(s: ReplicaShape): boolean {
  return s.maxRunning === Infinity && s.prefillMsPerKChar === 0 && (s.knee ?? Infinity) === Infinity && (s.cliff ?? Infinity) === Infinity;
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
  /** /responses: the instructions (its prefix) and the input, a string or a list of items. */
  instructions?: string;
  input?: string | { content?: Content }[];
  priority?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean } | null;
  max_tokens?: number;
}

const textOf = (c: Content): string => (typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => (typeof p?.text === "string" ? p.text : "")).join("") : "");

/** A /responses request's input text: the string, or its items' text joined by "\n". */
export function inputOf(body: ChatBody): string {
  const input = body.input;
  return typeof input === "string" ? input : Array.isArray(input) ? input.map((item) => textOf(item?.content)).join("\n") : "";
}

/** A request's prompt text: its messages' text joined by "\n", its instructions and input, or its `prompt`. */
export function promptOf(body: ChatBody): string {
  if (Array.isArray(body.messages)) return body.messages.map((m) => textOf(m?.content)).join("\n");
  if (body.input !== undefined) return typeof body.instructions === "string" ? `${body.instructions}\n${inputOf(body)}` : inputOf(body);
  return Array.isArray(body.prompt) ? body.prompt.join("\n") : typeof body.prompt === "string" ? body.prompt : "";
}

export interface PrefixOf {
  /** The cache key: model and prefix text. */
  key: string;
  prefixChars: number;
  /** Prompt characters after the prefix (never cached). */
  restChars: number;
}

/** A request's prefix: its system message (its instructions for /responses), or the first `prefixChars` characters of its prompt. */
export function prefixOf(body: ChatBody, shape: Pick<ReplicaShape, "prefixChars">): PrefixOf {
  const model = String(body.model ?? "");
  const prompt = promptOf(body);
  const first = Array.isArray(body.messages) ? body.messages[0] : undefined;
  const prefix =
    first?.role === "system" ? textOf(first.content) : body.input !== undefined && typeof body.instructions === "string" ? body.instructions : prompt.slice(0, shape.prefixChars);
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
  /** GET /v1/models requests (health probes, discovery). */
  probes: number;
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
  /** Time with more than `cliff` requests running (throughput falling), ms. */
  pastCliffMs: number;
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
  /** Requests received by content (the last message's text, the prompt, the input), with `countContents`; since the start or the last reset. */
  contents(): Map<string, number>;
  /** Date.now() at each POST and each GET /v1/models as it arrived, with `arrivals`; since the start or the last reset. */
  arrivals(): { posts: number[]; probes: number[] };
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
}

export async function startEngineReplica(shapeIn: Partial<ReplicaShape> = {}, opts: ReplicaOptions = {}): Promise<EngineReplica> {
  const shape = replicaShape(shapeIn);
  const fixed = isFixedLatency(shape);
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
  /** Fixed latency: requests on their timers now, and which life of the server they belong to (kill() starts a new one). */
  let fixedHeld = 0;
  let generation = 0;
  let contents = new Map<string, number>();
  let postTimes: number[] = [];
  let probeTimes: number[] = [];
  let last = performance.now();
  let timer: ReturnType<typeof setTimeout> | null = null;
  const fresh = () => ({
    seen: 0,
    answered: 0,
    preempted: 0,
    rejected: 0,
    probes: 0,
    peakInFlight: running.length + waiting.length + fixedHeld,
    hits: 0,
    misses: 0,
    byPriority: {} as Record<string, number>,
    workMs: 0,
    dropped: 0,
    kills: [] as number[],
    busyMs: 0,
    pastCliffMs: 0,
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
    if (n > speed.cliff) s.pastCliffMs += dt;
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

  /** Fixed latency: resolves true decodeMs from now, false if the replica was killed meanwhile. */
  function runFixed(): Promise<boolean> {
    const life = generation;
    fixedHeld++;
    s.peakInFlight = Math.max(s.peakInFlight, fixedHeld);
    s.workMs += shape.decodeMs;
    const finish = (): boolean => {
      if (life !== generation) return false;
      fixedHeld--;
      return true;
    };
    return shape.decodeMs > 0 ? Bun.sleep(shape.decodeMs).then(finish) : Promise.resolve(finish());
  }

  const list = { object: "list", data: models.map((id) => ({ id, object: "model", created: 0, owned_by: "engine-replica", max_model_len: 32768 })) };
  const enc = new TextEncoder();
  /** Every answer names its replica; one object for all, as the zero-latency benchmarks answer tens of thousands a second. */
  const replicaHeader: Record<string, string> = { "x-replica": String(index) };

  async function handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname.replace(/^\/v1/, "");
    if (req.method === "GET" && path === "/models") {
      s.probes++;
      if (opts.arrivals) probeTimes.push(Date.now());
      return Response.json(list);
    }
    if (req.method === "GET" && path === "/metrics") return new Response(metricsText(), { headers: { "content-type": "text/plain; version=0.0.4" } });
    if (req.method === "GET" && path === "/health") return new Response("");
    const chat = path === "/chat/completions";
    const responses = path === "/responses";
    if (req.method !== "POST" || (!chat && !responses && path !== "/completions")) return new Response("not found", { status: 404 });
    if (opts.arrivals) postTimes.push(Date.now());
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
    if (responses && body.stream === true) return errorJson(400, "streamed /responses are not modelled", "invalid_request_error");
    const last = chat ? textOf(body.messages?.[body.messages.length - 1]?.content) : responses ? inputOf(body) : promptOf(body);
    if (opts.countContents) contents.set(last, (contents.get(last) ?? 0) + 1);
    let r: { hit: boolean; work: number };
    let done: Promise<boolean>;
    let promptChars: number;
    if (fixed) {
      r = { hit: false, work: shape.decodeMs };
      done = runFixed();
      promptChars = promptOf(body).length;
    } else {
      const prefix = prefixOf(body, shape);
      ({ held: r, done } = enqueue(priority, prefix));
      promptChars = prefix.prefixChars + prefix.restChars;
    }
    const n = ++completions;
    const id = `${chat ? "chatcmpl" : responses ? "resp" : "cmpl"}-r${index}-${n}`;
    const fingerprint = `replica-${index}`;
    const promptTokens = tokens(promptChars);
    const usage = { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 };
    // A streamed answer's headers leave before the request may have started: they name the replica alone (as with a fixed latency: no cache, a known work).
    const headers = (streamed: boolean) =>
      streamed || fixed ? replicaHeader : { ...replicaHeader, "x-prefix-cache": r.hit ? "hit" : "miss", "x-work-ms": String(r.work) };
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
    if (responses)
      return Response.json(
        {
          id,
          object: "response",
          created_at: 0,
          status: "completed",
          model,
          output: [{ id: `msg-r${index}-${n}`, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: last, annotations: [] }] }],
          usage: { input_tokens: promptTokens, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: promptTokens + 5 },
        },
        { headers: headers(false) },
      );
    const choice = chat
      ? { index: 0, message: { role: "assistant", content: last }, finish_reason: "stop", logprobs: null }
      : { index: 0, text: last, finish_reason: "stop", logprobs: null };
    return Response.json({ id, object, created: 0, model, system_fingerprint: fingerprint, choices: [choice], usage }, { headers: headers(false) });
  }

  function metricsText(): string {
    advance(performance.now());
    const usage = running.length / shape.maxRunning;
    const runningNow = running.length + fixedHeld;
    const g = (name: string, help: string, type: "gauge" | "counter", v: number) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${label} ${v}\n`;
    return (
      g("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", runningNow) +
      g("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", waiting.length) +
      g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
      g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
      g("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "counter", queryTokens) +
      g("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "counter", hitTokens)
    );
  }

  const serve = (port: number) => Bun.serve({ port, hostname: "127.0.0.1", idleTimeout: opts.idleTimeout, fetch: handle });
  let server = serve(opts.port ?? 0);
  const port = server.port!;

  function dropAll(): number {
    advance(performance.now());
    const all = [...running.splice(0), ...waiting.splice(0)];
    for (const r of all) r.done(false);
    if (timer) clearTimeout(timer);
    timer = null;
    // Requests on their fixed-latency timers belong to the old life: they end unanswered.
    const onTimers = fixedHeld;
    fixedHeld = 0;
    generation++;
    return all.length + onTimers;
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
        probes: s.probes,
        inFlight: running.length + waiting.length + fixedHeld,
        running: running.length + fixedHeld,
        waiting: waiting.length,
        peakInFlight: s.peakInFlight,
        hits: s.hits,
        misses: s.misses,
        byPriority: { ...s.byPriority },
        workMs: s.workMs,
        dropped: s.dropped,
        kills: [...s.kills],
        busyMs: s.busyMs,
        pastCliffMs: s.pastCliffMs,
        elapsedMs: performance.now() - s.since,
      };
    },
    admissions: () => admitted.slice(-MAX_ADMISSIONS),
    cacheKeys: () => [...cache.keys()],
    metricsText,
    contents: () => contents,
    arrivals: () => ({ posts: postTimes, probes: probeTimes }),
    reset(o = {}) {
      advance(performance.now());
      s = fresh();
      admitted = [];
      contents = new Map();
      postTimes = [];
      probeTimes = [];
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
  const t: ReplicaStats = { index: -1, up: false, seen: 0, answered: 0, preempted: 0, rejected: 0, probes: 0, inFlight: 0, running: 0, waiting: 0, peakInFlight: 0, hits: 0, misses: 0, byPriority: {}, workMs: 0, dropped: 0, kills: [], busyMs: 0, pastCliffMs: 0, elapsedMs: 0 };
  for (const s of all) {
    t.up ||= s.up;
    for (const k of ["seen", "answered", "preempted", "rejected", "probes", "inFlight", "running", "waiting", "hits", "misses", "workMs", "dropped", "busyMs", "pastCliffMs"] as const) t[k] += s[k];
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

// ── As a process of its own ─────────────────────────────────────────────────
//
//   bun test/helpers/engineReplicas.ts --ports P[,P…] [--models m[,m…]]
//       [--latency-ms L (a fixed latency: fixedLatencyShape) | --decode-ms D
//        --prefill-ms P --max-running R --cache C --max-queued Q]
//       [--control-port C] [--count-contents] [--arrivals] [--idle-timeout-s 120]
//
// One replica a port (index = its place in --ports; 0: any free port), all
// printed on stdout once listening ("engine replicas on ports …"). The
// control port answers, for all the replicas together:
//   GET  /count   {posts, probes, inFlight, up}    (cheap, for polling)
//   GET  /stats   the summed stats (sumStats), and: requests (= seen),
//                 maxInFlight (= peakInFlight); with --count-contents distinct,
//                 resent (contents received more than once), extra (sends
//                 beyond the first); with --arrivals t0, postTimes and
//                 probeTimes (each arrival, ms since t0, sorted) and events
//                 (each down and up, Date.now())
//   POST /reset   zeroes the counts (caches kept); answers {at} (the new t0)
//   POST /down    kill(): every connect refused from the answer on; {at, inFlight}
//   POST /up      restart() on the same ports; {at}
// The idle timeout is long by default so that an upstream's kept-alive
// connections are not closed under it during a long benchmark.
if (import.meta.main) {
  const argv = process.argv.slice(2);
  const opt = (name: string) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : undefined);
  const num = (name: string) => (opt(name) === undefined ? undefined : Number(opt(name)));
  const ports = (opt("ports") ?? "0").split(",").map(Number);
  const latency = num("latency-ms");
  const shape: Partial<ReplicaShape> =
    latency !== undefined
      ? fixedLatencyShape(latency)
      : Object.fromEntries(
          Object.entries({ decodeMs: num("decode-ms"), prefillMsPerKChar: num("prefill-ms"), maxRunning: num("max-running"), cachePrefixes: num("cache"), maxQueued: num("max-queued") }).filter(
            ([, v]) => v !== undefined,
          ),
        );
  const engines = await startEngineReplicas(ports.length, shape, {
    ports,
    models: opt("models")?.split(","),
    idleTimeout: num("idle-timeout-s") ?? 120,
    countContents: argv.includes("--count-contents"),
    arrivals: argv.includes("--arrivals"),
  });
  let t0 = Date.now();
  let events: { kind: "down" | "up"; at: number }[] = [];
  const since = (times: number[][]) => times.flat().sort((a, b) => a - b).map((t) => t - t0);
  const control = num("control-port");
  if (control !== undefined)
    Bun.serve({
      port: control,
      hostname: "127.0.0.1",
      async fetch(req) {
        const path = new URL(req.url).pathname;
        if (req.method === "GET" && path === "/count") {
          const t = engines.total();
          return Response.json({ posts: t.seen, probes: t.probes, inFlight: t.inFlight, up: t.up });
        }
        if (req.method === "GET" && path === "/stats") {
          const t = engines.total();
          const out: Record<string, unknown> = { ...t, requests: t.seen, maxInFlight: t.peakInFlight };
          if (argv.includes("--count-contents")) {
            let distinct = 0;
            let resent = 0;
            let extra = 0;
            const all = new Map<string, number>();
            for (const r of engines.replicas) for (const [c, n] of r.contents()) all.set(c, (all.get(c) ?? 0) + n);
            for (const n of all.values()) {
              distinct++;
              if (n > 1) {
                resent++;
                extra += n - 1;
              }
            }
            Object.assign(out, { distinct, resent, extra });
          }
          if (argv.includes("--arrivals"))
            Object.assign(out, {
              t0,
              postTimes: since(engines.replicas.map((r) => r.arrivals().posts)),
              probeTimes: since(engines.replicas.map((r) => r.arrivals().probes)),
              events,
            });
          return Response.json(out);
        }
        if (req.method === "POST" && path === "/reset") {
          engines.reset({ keepCache: true });
          t0 = Date.now();
          events = [];
          return Response.json({ at: t0 });
        }
        if (req.method === "POST" && path === "/down") {
          let inFlight = 0;
          for (const r of engines.replicas) inFlight += await r.kill();
          // After the stop: from here on every connect is refused.
          const at = Date.now();
          events.push({ kind: "down", at });
          return Response.json({ at, inFlight });
        }
        if (req.method === "POST" && path === "/up") {
          for (const r of engines.replicas) await r.restart();
          const at = Date.now();
          events.push({ kind: "up", at });
          return Response.json({ at });
        }
        return new Response("not found", { status: 404 });
      },
    });
  console.log(`engine replicas on ports ${engines.replicas.map((r) => r.port).join(",")}${control !== undefined ? `, control on ${control}` : ""}`);
}

// A fake OpenAI-compatible engine: a real HTTP server on loopback (Bun.serve,
// port 0) that offpeak can use as an upstream. It lists models on GET /models,
// answers POST /chat/completions (the reply echoes the last user message)
// and POST /embeddings in OpenAI shapes with usage (also POST /responses and
// POST /completions, which echo the last user input / the prompt, streamed
// as SSE when the body asks for stream:true), and can be told to fail:
// per request, a plan sees the message content and how many times that
// content was already received, and answers with an HTTP error (optionally
// with retry-after) or closes the connection without an answer.
//
// Every request is counted by its message content (the last user message of
// a chat request, the input of an embeddings request), so a test can assert
// how many times each batch line was sent upstream. Routes answer with and
// without the /v1 prefix.
//
// For upstream trouble (docs/CONTRACT.md §11) it can also go away and come back on the
// same port (`down()` closes the listener and drops open connections, so
// clients get "connection refused"; `up()` listens again with the same knobs
// and counters), or accept requests and never answer them (`hang`). GET
// /models probes are counted apart from POST requests, and arrival times are
// kept so a test can count what was sent during a phase.

export type FakeFailure =
  /** Answer with this status (and an OpenAI error body unless `body` is given). */
  | { status: number; retryAfter?: number | string; body?: unknown }
  /** Drop the connection without an HTTP answer (the client sees ECONNRESET). */
  | "close";

export interface FakeRequestInfo {
  /** "/chat/completions", "/embeddings", "/responses" or "/completions" (without /v1). */
  path: string;
  /** The message content the request is counted by. */
  content: string;
  /** 1 for the first time this content is received, 2 for the second… */
  attempt: number;
  body: Record<string, unknown>;
}

/** Decides how to answer one request: a failure, or null/undefined to answer normally. */
export type FailPlan = (req: FakeRequestInfo) => FakeFailure | null | undefined;

export interface FakeUpstreamOptions {
  /** Model ids listed on GET /models. */
  models?: string[];
  /** Delay before each answer (ms), fixed or per content. */
  latencyMs?: number | ((content: string) => number);
  plan?: FailPlan | null;
  /** A fixed port (default 0: any free one). */
  port?: number;
}

export interface FakeStats {
  /** POST requests (chat + embeddings) received. */
  requests: number;
  inFlight: number;
  maxInFlight: number;
  byStatus: Map<number | "close" | "hang", number>;
  /** GET /models and GET /models/{id} requests received (health probes, discovery). */
  probes: number;
  /** Arrival times (Date.now()) of the POST requests, in order. */
  requestTimes: number[];
  /** Arrival times (Date.now()) of the GET /models probes, in order. */
  probeTimes: number[];
}

export interface FakeUpstream {
  /** http://127.0.0.1:PORT */
  url: string;
  /** url + "/v1": what OFFPEAK_UPSTREAM_URL / base_url should be. */
  baseUrl: string;
  port: number;
  /** Requests received (chat + embeddings), by message content. */
  counts: Map<string, number>;
  /** Totals since start (or the last reset). */
  stats: FakeStats;
  /** Mutable knobs: change them between tests. */
  models: string[];
  latencyMs: number | ((content: string) => number);
  plan: FailPlan | null;
  /**
   * While true, every request (probes too) is accepted, counted and never
   * answered: the client waits until its own timeout, or until down()/stop()
   * drops the connection. A stand-in for an engine that hangs.
   */
  hang: boolean;
  /** Whether the listener is up (false between down() and up()). */
  readonly isUp: boolean;
  /** Clears counters (not the knobs). */
  reset(): void;
  /** Closes the listener and drops every open connection (hung requests included): connections are refused until up(). */
  down(): Promise<void>;
  /** Listens again on the same port, with the same knobs and counters. */
  up(): Promise<void>;
  /** POST requests that arrived in [from, to) (Date.now() times; `to` defaults to now). */
  requestsBetween(from: number, to?: number): number;
  /** GET /models probes that arrived in [from, to). */
  probesBetween(from: number, to?: number): number;
  stop(): Promise<void>;
}

/** A stable 32-bit hash of a string (FNV-1a), for choosing a share of requests deterministically. */
export function hashOf(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** True for about `share` (0..1) of contents, always the same ones. */
export const inShare = (share: number) => (content: string) => hashOf(content) % 10_000 < share * 10_000;

/** True for about `share` of (content, attempt) pairs, always the same ones: a random-looking but reproducible failure. */
export const atRandom = (share: number, salt = "") => (content: string, attempt: number) => hashOf(`${salt}${attempt}#${content}`) % 10_000 < share * 10_000;

/** Building blocks for plans. */
export const plans = {
  /** Fail the first `k` attempts of every request whose content matches (default: all). */
  failFirst(k: number, failure: FakeFailure, match: (content: string) => boolean = () => true): FailPlan {
    return (r) => (r.attempt <= k && match(r.content) ? failure : null);
  },
  /** Always fail requests whose content matches. */
  always(failure: FakeFailure, match: (content: string) => boolean): FailPlan {
    return (r) => (match(r.content) ? failure : null);
  },
  /**
   * Fail about `share` of all attempts, chosen by a hash of content and
   * attempt number: the same run of failures every time for the same inputs
   * (e.g. 30% 503s). `salt` picks another deterministic sequence.
   */
  random(share: number, failure: FakeFailure, salt = ""): FailPlan {
    const hit = atRandom(share, salt);
    return (r) => (hit(r.content, r.attempt) ? failure : null);
  },
  /** Fail every request while `active()` is true (a phase the test starts and ends, e.g. 429 with retry-after). */
  when(active: () => boolean, failure: FakeFailure): FailPlan {
    return () => (active() ? failure : null);
  },
  /** The first plan that returns a failure wins. */
  first(...ps: FailPlan[]): FailPlan {
    return (r) => {
      for (const p of ps) {
        const f = p(r);
        if (f) return f;
      }
      return null;
    };
  },
};

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content
      .map((p) => (p && typeof p === "object" && typeof (p as { text?: unknown }).text === "string" ? (p as { text: string }).text : ""))
      .join("");
  return "";
}

function contentOf(path: string, body: Record<string, unknown>): string {
  if (path === "/embeddings") return typeof body.input === "string" ? body.input : JSON.stringify(body.input);
  // Completions: the prompt; Responses: a string input, else its last user item's text.
  if (path === "/completions") return typeof body.prompt === "string" ? body.prompt : JSON.stringify(body.prompt);
  if (path === "/responses" && typeof body.input === "string") return body.input;
  const messages = Array.isArray(path === "/responses" ? body.input : body.messages)
    ? ((path === "/responses" ? body.input : body.messages) as { role?: string; content?: unknown }[])
    : [];
  if (path === "/responses") {
    let last = "";
    for (const m of messages) if (m && m.role === "user") last = textOf(m.content);
    return last;
  }
  const chatMessages = Array.isArray(body.messages) ? (body.messages as { role?: string; content?: unknown }[]) : [];
  let last = "";
  for (const m of chatMessages) if (m && m.role === "user") last = textOf(m.content);
  return last;
}

const words = (s: string) => (s.trim() === "" ? 0 : s.trim().split(/\s+/).length);

let seq = 0;
const fakeId = (prefix: string) => `${prefix}${(++seq).toString(36).padStart(8, "0")}${Math.random().toString(36).slice(2, 10)}`;

function errorBody(status: number): unknown {
  const type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error";
  return { error: { message: `fake upstream says ${status}`, type, param: null, code: status === 429 ? "rate_limit_exceeded" : null } };
}

function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", "x-request-id": fakeId("req_fake_"), ...headers } });
}

function chatCompletion(body: Record<string, unknown>, content: string) {
  const prompt = words(content) + 3;
  const completion = words(content);
  return {
    id: fakeId("chatcmpl-fake"),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: String(body.model),
    choices: [{ index: 0, message: { role: "assistant", content, refusal: null }, logprobs: null, finish_reason: "stop" }],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    },
  };
}

function embeddings(body: Record<string, unknown>) {
  const inputs = Array.isArray(body.input) && body.input.every((x) => typeof x === "string") ? (body.input as string[]) : [contentOf("/embeddings", body)];
  const dims = typeof body.dimensions === "number" ? body.dimensions : 8;
  let tokens = 0;
  const data = inputs.map((text, index) => {
    tokens += words(text);
    const v = new Float32Array(dims);
    for (let i = 0; i < dims; i++) v[i] = ((hashOf(`${text}:${i}`) % 2000) - 1000) / 1000;
    const embedding = body.encoding_format === "base64" ? Buffer.from(v.buffer).toString("base64") : Array.from(v);
    return { object: "embedding", index, embedding };
  });
  return { object: "list", data, model: String(body.model), usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** A Responses API response object whose one message echoes `content`. */
function responseObject(body: Record<string, unknown>, content: string, status: "in_progress" | "completed") {
  const input = words(content) + 3;
  const output = words(content);
  return {
    id: fakeId("resp_fake"),
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    model: String(body.model),
    output:
      status === "completed" ? [{ id: "msg_fake", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: content, annotations: [] }] }] : [],
    parallel_tool_calls: true,
    temperature: 1,
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    usage:
      status === "completed"
        ? { input_tokens: input, input_tokens_details: { cached_tokens: 1, cache_write_tokens: 0 }, output_tokens: output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + output }
        : null,
    metadata: {},
  };
}

function textCompletion(body: Record<string, unknown>, content: string) {
  const prompt = words(content);
  return {
    id: fakeId("cmpl-fake"),
    object: "text_completion",
    created: Math.floor(Date.now() / 1000),
    model: String(body.model),
    choices: [{ text: content, index: 0, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: prompt, total_tokens: 2 * prompt },
  };
}

/** The streamed answer of /responses (named events) or /completions (data chunks, then [DONE]), one word per delta. */
function sseAnswer(path: string, body: Record<string, unknown>, content: string): Response {
  const pieces = content.split(/(?=\s)/).filter((p) => p !== "");
  let events: string[];
  if (path === "/responses") {
    const done = responseObject(body, content, "completed");
    const item = (done.output as { content: unknown[] }[])[0]!;
    let seq = 0;
    const ev = (type: string, fields: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`;
    const at = { item_id: "msg_fake", output_index: 0, content_index: 0 };
    const started = { ...done, status: "in_progress", output: [], usage: null };
    events = [
      ev("response.created", { response: started }),
      ev("response.in_progress", { response: started }),
      ev("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress", content: [] } }),
      ev("response.content_part.added", { ...at, part: { type: "output_text", text: "", annotations: [] } }),
      ...pieces.map((delta) => ev("response.output_text.delta", { ...at, delta })),
      ev("response.output_text.done", { ...at, text: content }),
      ev("response.content_part.done", { ...at, part: { type: "output_text", text: content, annotations: [] } }),
      ev("response.output_item.done", { output_index: 0, item }),
      ev("response.completed", { response: done }),
    ];
  } else {
    const c = textCompletion(body, content);
    const chunk = (text: string, finish: string | null) => `data: ${JSON.stringify({ ...c, choices: [{ text, index: 0, logprobs: null, finish_reason: finish }], usage: null })}\n\n`;
    events = [...pieces.map((p) => chunk(p, null)), chunk("", "stop"), `data: ${JSON.stringify({ ...c, choices: [], usage: c.usage })}\n\n`, "data: [DONE]\n\n"];
  }
  return new Response(events.join(""), { headers: { "content-type": "text/event-stream", "x-request-id": fakeId("req_fake_") } });
}

/** How many of the sorted `times` fall in [from, to). */
function countIn(times: number[], from: number, to: number): number {
  const lower = (x: number) => {
    let lo = 0;
    let hi = times.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (times[mid]! < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return lower(to) - lower(from);
}

const ANSWERED = new Set(["/chat/completions", "/embeddings", "/responses", "/completions"]);

export async function startFakeUpstream(opts: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const stats: FakeStats = { requests: 0, inFlight: 0, maxInFlight: 0, byStatus: new Map(), probes: 0, requestTimes: [], probeTimes: [] };
  let server: ReturnType<typeof Bun.serve> | null = null;
  /** Requests held by `hang`: answered (into a dropped connection) when the listener goes down. */
  const hung = new Set<() => void>();
  const fake = {
    models: opts.models ?? ["fake-chat", "fake-embed"],
    latencyMs: opts.latencyMs ?? 0,
    plan: opts.plan ?? null,
    hang: false,
    counts: new Map<string, number>(),
    stats,
    get isUp() {
      return server !== null;
    },
  } as FakeUpstream;
  const bump = (k: number | "close" | "hang") => stats.byStatus.set(k, (stats.byStatus.get(k) ?? 0) + 1);
  const hangHere = () =>
    new Promise<Response>((resolve) => {
      bump("hang");
      const answer = () => {
        hung.delete(answer);
        resolve(json(errorBody(503), 503));
      };
      hung.add(answer);
    });
  const releaseHung = () => {
    for (const answer of [...hung]) answer();
  };

  async function handle(req: Request): Promise<Response> {
    let path = new URL(req.url).pathname;
    if (path.startsWith("/v1/")) path = path.slice(3);
    if (req.method === "GET" && (path === "/models" || path.startsWith("/models/"))) {
      stats.probes++;
      stats.probeTimes.push(Date.now());
      if (fake.hang) return hangHere();
      if (path === "/models") return json({ object: "list", data: fake.models.map((id) => ({ id, object: "model", created: 1700000000, owned_by: "fake" })) });
      const id = decodeURIComponent(path.slice("/models/".length));
      return fake.models.includes(id) ? json({ id, object: "model", created: 1700000000, owned_by: "fake" }) : json(errorBody(404), 404);
    }
    if (req.method !== "POST" || !ANSWERED.has(path)) return json(errorBody(404), 404);

    let body: Record<string, unknown>;
    try {
      body = (await req.json()) as Record<string, unknown>;
    } catch {
      return json(errorBody(400), 400);
    }
    const content = contentOf(path, body);
    const attempt = (fake.counts.get(content) ?? 0) + 1;
    fake.counts.set(content, attempt);
    stats.requests++;
    stats.requestTimes.push(Date.now());
    if (fake.hang) return hangHere();
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    try {
      const latency = typeof fake.latencyMs === "function" ? fake.latencyMs(content) : fake.latencyMs;
      if (latency > 0) await Bun.sleep(latency);
      const failure = fake.plan?.({ path, content, attempt, body }) ?? null;
      if (failure === "close") {
        bump("close");
        // A body stream that errors before its first byte makes Bun drop the connection.
        return new Response(new ReadableStream({ start: (c) => c.error(undefined) }));
      }
      if (failure) {
        bump(failure.status);
        const headers: Record<string, string> = {};
        if (failure.retryAfter !== undefined) headers["retry-after"] = String(failure.retryAfter);
        return json(failure.body ?? errorBody(failure.status), failure.status, headers);
      }
      if (body.model !== undefined && !fake.models.includes(String(body.model))) {
        bump(404);
        return json({ error: { message: `The model '${String(body.model)}' does not exist`, type: "invalid_request_error", param: "model", code: "model_not_found" } }, 404);
      }
      bump(200);
      if ((path === "/responses" || path === "/completions") && body.stream === true) return sseAnswer(path, body, content);
      if (path === "/responses") return json(responseObject(body, content, "completed"));
      if (path === "/completions") return json(textCompletion(body, content));
      return json(path === "/embeddings" ? embeddings(body) : chatCompletion(body, content));
    } finally {
      stats.inFlight--;
    }
  }

  const listen = (port: number) => Bun.serve({ port, hostname: "127.0.0.1", idleTimeout: 60, fetch: handle });

  server = listen(opts.port ?? 0);
  fake.port = server.port!;
  fake.url = `http://127.0.0.1:${server.port}`;
  fake.baseUrl = `${fake.url}/v1`;
  fake.reset = () => {
    fake.counts.clear();
    stats.requests = 0;
    stats.maxInFlight = stats.inFlight;
    stats.byStatus.clear();
    stats.probes = 0;
    stats.requestTimes.length = 0;
    stats.probeTimes.length = 0;
  };
  fake.requestsBetween = (from, to = Date.now() + 1) => countIn(stats.requestTimes, from, to);
  fake.probesBetween = (from, to = Date.now() + 1) => countIn(stats.probeTimes, from, to);
  fake.down = async () => {
    const s = server;
    server = null;
    if (!s) return;
    // stop(true) closes the listening socket and every open connection, so
    // requests in flight see their connection dropped and new ones are refused.
    const stopped = s.stop(true);
    releaseHung();
    await stopped;
  };
  fake.up = async () => {
    if (server) return;
    // The port was just released by this process; a few quick retries cover
    // a listener that is still being torn down.
    for (let i = 0; ; i++) {
      try {
        server = listen(fake.port);
        return;
      } catch (e) {
        if (i >= 50) throw e;
        await Bun.sleep(20);
      }
    }
  };
  fake.stop = async () => {
    await fake.down();
  };
  return fake;
}

/** A loopback port with nothing listening on it (bound, then released). */
export async function closedPort(): Promise<number> {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = l.port;
  l.stop(true);
  return port;
}

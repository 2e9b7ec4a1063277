// An engine model for tests and benchmarks (docs/CONTRACT.md §18, adaptive
// concurrency): a real OpenAI-compatible HTTP server on loopback whose
// latency grows with the requests in flight the way a continuous-batching
// engine's does, deterministically.
//
// Every request needs the same work: `unloadedMs` of it when it runs alone.
// The requests in flight share the engine (processor sharing): with n of
// them, each progresses at speedAt(n), so a request that arrives slows the
// others down at once, as a bigger batch slows every decoding step.
//
//   n ≤ knee          speed falls gently (at the knee, latency is (1 + slope)
//                     × unloaded): throughput rises almost in proportion
//   knee < n ≤ cliff  the batch is full: latency grows in proportion to n,
//                     throughput stays at its peak
//   n > cliff         the "KV cache" overflows and requests are preempted and
//                     recomputed: throughput falls (÷ 1 + fall·(n − cliff)/cliff)
//   n ≥ failAt        a new request is answered 503 at once
//
// It counts what a benchmark needs to judge a limit: answers, 503s, the most
// in flight, and how long it spent with more than `cliff` in flight.

export interface EngineShape {
  /** Latency of a request alone, ms. */
  unloadedMs: number;
  /** Requests in flight where throughput stops rising. */
  knee: number;
  /** Requests in flight past which throughput falls. */
  cliff: number;
  /** From this many in flight, a new request gets 503 at once. */
  failAt: number;
  /** Latency at the knee is (1 + slope) × unloaded (default 0.1). */
  slope?: number;
  /** How fast throughput falls past the cliff (default 1: at 2 × cliff, half the peak). */
  fall?: number;
}

/** How fast each of n requests in flight progresses (1: as fast as alone). */
export function speedAt(e: EngineShape, n: number): number {
  const slope = e.slope ?? 0.1;
  const fall = e.fall ?? 1;
  if (n <= 1) return 1;
  const atKnee = 1 / (1 + slope);
  if (n <= e.knee) return 1 / (1 + (slope * (n - 1)) / Math.max(1, e.knee - 1));
  const full = (atKnee * e.knee) / n;
  if (n <= e.cliff) return full;
  return full / (1 + (fall * (n - e.cliff)) / e.cliff);
}

/** Latency with n in flight all along, ms. */
export const latencyAt = (e: EngineShape, n: number): number => e.unloadedMs / speedAt(e, n);

/** Answers per second with n in flight all along. */
export const throughputAt = (e: EngineShape, n: number): number => (n * 1000) / latencyAt(e, n);

export interface EngineStats {
  /** Requests answered 200. */
  answered: number;
  /** Requests answered 503 (too many in flight). */
  rejected: number;
  inFlight: number;
  maxInFlight: number;
  /** Time with more than `cliff` in flight, ms. */
  pastCliffMs: number;
  /** Time with anything in flight, ms. */
  busyMs: number;
  /** Time since the start or the last reset, ms. */
  elapsedMs: number;
}

export interface EngineModel {
  /** http://127.0.0.1:PORT/v1: an upstream's base_url. */
  baseUrl: string;
  port: number;
  shape: EngineShape;
  stats(): EngineStats;
  reset(): void;
  stop(): Promise<void>;
}

interface Running {
  /** Work left, in ms of running alone. */
  left: number;
  done: () => void;
}

export async function startEngineModel(shape: EngineShape, opts: { port?: number; models?: string[] } = {}): Promise<EngineModel> {
  const models = opts.models ?? ["engine-chat"];
  const running: Running[] = [];
  let last = performance.now();
  let timer: ReturnType<typeof setTimeout> | null = null;
  let s = { answered: 0, rejected: 0, maxInFlight: 0, pastCliffMs: 0, busyMs: 0, since: last };

  /** Moves every running request on by the time since the last event, at the speed of that time's load. */
  function advance(now: number): void {
    const dt = now - last;
    last = now;
    const n = running.length;
    if (dt <= 0 || n === 0) return;
    const step = dt * speedAt(shape, n);
    for (const r of running) r.left -= step;
    s.busyMs += dt;
    if (n > shape.cliff) s.pastCliffMs += dt;
  }

  function schedule(): void {
    if (timer) clearTimeout(timer);
    timer = null;
    if (running.length === 0) return;
    let least = Infinity;
    for (const r of running) least = Math.min(least, r.left);
    timer = setTimeout(finishDue, Math.max(0, least / speedAt(shape, running.length)));
  }

  function finishDue(): void {
    timer = null;
    advance(performance.now());
    // Timers fire on whole milliseconds: what is within a few microseconds of done is done.
    for (let i = running.length - 1; i >= 0; i--)
      if (running[i]!.left <= 0.005) {
        const [r] = running.splice(i, 1);
        s.answered++;
        r!.done();
      }
    schedule();
  }

  /** Resolves when the request's work is done; false if it was refused (503). */
  function run(): Promise<boolean> | false {
    const now = performance.now();
    advance(now);
    if (running.length >= shape.failAt) {
      s.rejected++;
      return false;
    }
    const p = new Promise<boolean>((resolve) => running.push({ left: shape.unloadedMs, done: () => resolve(true) }));
    s.maxInFlight = Math.max(s.maxInFlight, running.length);
    schedule();
    return p;
  }

  const list = { object: "list", data: models.map((id) => ({ id, object: "model", created: 0, owned_by: "engine-model" })) };
  const server = Bun.serve({
    port: opts.port ?? 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname.replace(/^\/v1/, "");
      if (req.method === "GET" && path === "/models") return Response.json(list);
      if (req.method !== "POST" || path !== "/chat/completions") return new Response("not found", { status: 404 });
      let body: { model?: string; messages?: { content?: unknown }[] };
      try {
        body = (await req.json()) as typeof body;
      } catch {
        return Response.json({ error: { message: "bad JSON", type: "invalid_request_error", param: null, code: null } }, { status: 400 });
      }
      const ran = run();
      if (ran === false)
        return Response.json({ error: { message: "engine overloaded: too many requests in flight", type: "server_error", param: null, code: null } }, { status: 503 });
      await ran;
      const content = body.messages?.[body.messages.length - 1]?.content;
      return Response.json({
        id: "chatcmpl-engine",
        object: "chat.completion",
        created: 0,
        model: body.model ?? models[0],
        choices: [{ index: 0, message: { role: "assistant", content: typeof content === "string" ? content : "" }, finish_reason: "stop", logprobs: null }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      });
    },
  });

  return {
    baseUrl: `http://127.0.0.1:${server.port}/v1`,
    port: server.port!,
    shape,
    stats() {
      advance(performance.now());
      return {
        answered: s.answered,
        rejected: s.rejected,
        inFlight: running.length,
        maxInFlight: s.maxInFlight,
        pastCliffMs: s.pastCliffMs,
        busyMs: s.busyMs,
        elapsedMs: performance.now() - s.since,
      };
    },
    reset() {
      advance(performance.now());
      s = { answered: 0, rejected: 0, maxInFlight: running.length, pastCliffMs: 0, busyMs: 0, since: performance.now() };
    },
    async stop() {
      if (timer) clearTimeout(timer);
      for (const r of running.splice(0)) r.done();
      await server.stop(true);
    },
  };
}

// A loopback OpenAI-compatible engine for bench/outage.ts that can be stopped
// and started again on the same port, as a real engine restarts:
//   bun bench/outage-engine.ts PORT CONTROL_PORT [LATENCY_MS]
// PORT serves GET /v1/models and POST /v1/chat/completions (echoing the last
// message, after LATENCY_MS). CONTROL_PORT stays up the whole time:
//   POST /down   closes PORT and drops its open connections (clients then get
//                "connection refused"); answers {at, inFlight}
//   POST /up     listens on PORT again; answers {at}
//   POST /reset  clears the counters; answers {at}
//   GET  /count  {posts, probes, inFlight}  (cheap, for polling)
//   GET  /stats  {t0, posts: [ms since t0…], probes: [ms since t0…], events}
// Times are Date.now() milliseconds (the bench runs on the same clock).
const port = Number(process.argv[2]);
const controlPort = Number(process.argv[3]);
const latencyMs = Number(process.argv[4] ?? 0);
if (!port || !controlPort) throw new Error("usage: bun bench/outage-engine.ts PORT CONTROL_PORT [LATENCY_MS]");

let t0 = Date.now();
/** Arrival times (ms since t0) of POST requests and of GET /models probes. */
let posts: number[] = [];
let probes: number[] = [];
let events: { kind: "down" | "up"; at: number }[] = [];
let inFlight = 0;

const models = { object: "list", data: [{ id: "fake-model", object: "model", created: 0, owned_by: "fake" }] };

async function handle(req: Request): Promise<Response> {
  const path = new URL(req.url).pathname;
  if (req.method === "GET" && path === "/v1/models") {
    probes.push(Date.now() - t0);
    return Response.json(models);
  }
  if (req.method === "POST" && path === "/v1/chat/completions") {
    posts.push(Date.now() - t0);
    inFlight++;
    try {
      let body: { messages: { content: string }[]; model: string };
      try {
        body = (await req.json()) as typeof body;
      } catch {
        return Response.json({ error: { message: "bad JSON", type: "invalid_request_error", param: null, code: null } }, { status: 400 });
      }
      const content = body.messages[body.messages.length - 1]?.content ?? "";
      if (latencyMs > 0) await Bun.sleep(latencyMs);
      return Response.json({
        id: "chatcmpl-fake",
        object: "chat.completion",
        created: 0,
        model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop", logprobs: null }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      });
    } finally {
      inFlight--;
    }
  }
  return new Response("not found", { status: 404 });
}

const listen = () => Bun.serve({ port, hostname: "127.0.0.1", idleTimeout: 120, fetch: handle });
let server: ReturnType<typeof Bun.serve> | null = listen();

Bun.serve({
  port: controlPort,
  hostname: "127.0.0.1",
  async fetch(req) {
    const path = new URL(req.url).pathname;
    if (req.method === "GET" && path === "/count") return Response.json({ posts: posts.length, probes: probes.length, inFlight, up: server !== null });
    if (req.method === "GET" && path === "/stats") return Response.json({ t0, posts, probes, events });
    if (req.method === "POST" && path === "/reset") {
      t0 = Date.now();
      posts = [];
      probes = [];
      events = [];
      return Response.json({ at: t0 });
    }
    if (req.method === "POST" && path === "/down") {
      const dropped = inFlight;
      if (server) {
        const s = server;
        server = null;
        await s.stop(true);
      }
      // After the stop: from here on every connect is refused.
      const at = Date.now();
      events.push({ kind: "down", at });
      return Response.json({ at, inFlight: dropped });
    }
    if (req.method === "POST" && path === "/up") {
      for (let i = 0; !server; i++) {
        try {
          server = listen();
        } catch (e) {
          if (i > 100) throw e;
          await Bun.sleep(10);
        }
      }
      const at = Date.now();
      events.push({ kind: "up", at });
      return Response.json({ at });
    }
    return new Response("not found", { status: 404 });
  },
});
console.log(`outage engine on ${port}, control on ${controlPort}`);

export {};

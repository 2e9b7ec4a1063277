// A zero-latency OpenAI-compatible upstream for benchmarks, run as its own
// process: `bun bench/fake-upstream.ts PORT`. Answers GET /v1/models and
// POST /v1/chat/completions (echoing the last message) and /v1/embeddings,
// and POST /v1/responses (a response object echoing a string input).
// An optional second argument adds a fixed latency (ms) to every completion,
// to stand in for a model that takes time: `bun bench/fake-upstream.ts PORT 20`.
const port = Number(process.argv[2] ?? 0);
const latencyMs = Number(process.argv[3] ?? 0);
const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  async fetch(req) {
    const path = new URL(req.url).pathname;
    if (req.method === "GET" && path === "/v1/models")
      return Response.json({ object: "list", data: [{ id: "fake-model", object: "model", created: 0, owned_by: "fake" }] });
    if (req.method === "POST" && path === "/v1/chat/completions") {
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
    }
    if (req.method === "POST" && path === "/v1/responses") {
      let body: { input: unknown; model: string };
      try {
        body = (await req.json()) as typeof body;
      } catch {
        return Response.json({ error: { message: "bad JSON", type: "invalid_request_error", param: null, code: null } }, { status: 400 });
      }
      const text = typeof body.input === "string" ? body.input : "";
      if (latencyMs > 0) await Bun.sleep(latencyMs);
      return Response.json({
        id: "resp_fake",
        object: "response",
        created_at: 0,
        status: "completed",
        model: body.model,
        output: [{ id: "msg_fake", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text, annotations: [] }] }],
        usage: { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 },
      });
    }
    return new Response("not found", { status: 404 });
  },
});
console.log(`fake upstream on ${server.port}`);

export {};

// A zero-latency OpenAI-compatible upstream for benchmarks, run as its own
// process: `bun bench/fake-upstream.ts PORT`. Answers GET /v1/models and
// POST /v1/chat/completions (echoing the last message) and /v1/embeddings.
const port = Number(process.argv[2] ?? 0);
const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  async fetch(req) {
    const path = new URL(req.url).pathname;
    if (req.method === "GET" && path === "/v1/models")
      return Response.json({ object: "list", data: [{ id: "fake-model", object: "model", created: 0, owned_by: "fake" }] });
    if (req.method === "POST" && path === "/v1/chat/completions") {
      const body = (await req.json()) as { messages: { content: string }[]; model: string };
      const content = body.messages[body.messages.length - 1]?.content ?? "";
      return Response.json({
        id: "chatcmpl-fake",
        object: "chat.completion",
        created: 0,
        model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop", logprobs: null }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      });
    }
    return new Response("not found", { status: 404 });
  },
});
console.log(`fake upstream on ${server.port}`);

export {};

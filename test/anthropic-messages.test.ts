// docs/CONTRACT.md §22, Anthropic's Messages API, with the official
// @anthropic-ai/sdk as the client, its base URL the server's root: on
// offpeak-echo (translated to a chat completion and back), through an
// OpenAI-speaking upstream (tool use round trip, images, streamed tool
// calls), through an upstream with `api: "anthropic"` (passed through), and
// its errors in Anthropic's shape, raised as the SDK's error classes.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { configWriter, jsonResponse, REQUEST_ID, startScriptedUpstream, upstreamChunk, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { awayFromMinuteEnd, pollUntil } from "./helpers/wait";

let t: TestServer;
let up: ScriptedUpstream;
let claude: ScriptedUpstream;
let client: Anthropic;
const cfg = configWriter("offpeak-anthropic-");
const MSG_ID = /^msg_[0-9A-Za-z]{24}$/;

const sdk = (apiKey: string | null = t.admin) => new Anthropic({ baseURL: t.url, apiKey, maxRetries: 0 });
/** Sampling fields the API takes (and offpeak passes on), which this SDK version's types no longer list. */
const sampling = (fields: { temperature?: number; top_p?: number; top_k?: number }) => fields as {};
const user = (content: Anthropic.MessageParam["content"]): Anthropic.MessageParam => ({ role: "user", content });

/** An Anthropic message as an upstream with api "anthropic" answers. */
const upstreamMessage = (text: string) => ({
  id: "msg_from_the_upstream",
  type: "message",
  role: "assistant",
  model: "claude-up",
  content: [{ type: "text", text }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 21, output_tokens: 2 },
});

const sse = (events: string[]) => new Response(events.join(""), { headers: { "content-type": "text/event-stream" } });
const named = (e: Record<string, unknown>) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["up-chat"] });
  claude = await startScriptedUpstream({ models: ["claude-up"] });
  const config = cfg.write("config.json", {
    limits: { max_json_bytes: 65536 },
    upstreams: [
      { name: "openai-up", base_url: up.baseUrl, models: ["up-chat"] },
      { name: "claude-up", base_url: claude.baseUrl, models: ["claude-up"], api: "anthropic" },
    ],
  });
  t = await startTestServer({ argv: ["--config", config] });
  client = sdk();
});
afterEach(() => {
  up.reset();
  claude.reset();
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
  await claude?.stop();
  cfg.cleanup();
});

describe("offpeak-echo through @anthropic-ai/sdk (translated to a chat completion)", () => {
  test("a plain message: the last user text as a text block, end_turn, usage; the request id as request-id", async () => {
    const { data: m, response } = await client.messages.create({ model: "offpeak-echo", max_tokens: 100, messages: [user("Hello there, Claude")], metadata: { user_id: "u-1" } }).withResponse();
    expect(m.id).toMatch(MSG_ID);
    expect(m).toMatchObject({ type: "message", role: "assistant", model: "offpeak-echo", content: [{ type: "text", text: "Hello there, Claude" }], stop_reason: "end_turn", stop_sequence: null });
    // 4 tokens ("Hello", "there", ",", "Claude") plus 3 for the message's framing (docs/CONTRACT.md §6).
    expect(m.usage).toMatchObject({ input_tokens: 7, output_tokens: 4 });
    expect(response.headers.get("request-id")).toMatch(REQUEST_ID);
  });

  test("system and several turns: the reply is the last user turn; input_tokens counts the system text, and count_tokens says the same", async () => {
    const params = {
      model: "offpeak-echo",
      max_tokens: 100,
      system: [{ type: "text" as const, text: "You repeat things." }],
      messages: [user("first question"), { role: "assistant" as const, content: "first answer" }, user([{ type: "text" as const, text: "second question" }])],
    };
    const m = await client.messages.create(params);
    expect(m.content).toEqual([{ type: "text", text: "second question", citations: null }]);
    // Four messages (system, user, assistant, user): 4 + 2 + 2 + 2 tokens, 3 each for framing.
    expect(m.usage.input_tokens).toBe(10 + 4 * 3);
    const { max_tokens: _, ...countParams } = params;
    expect(await client.messages.countTokens(countParams)).toEqual({ input_tokens: m.usage.input_tokens });
  });

  test("stop_sequences: the reply is cut at the first one to occur, stop_reason stop_sequence naming it", async () => {
    const m = await client.messages.create({ model: "offpeak-echo", max_tokens: 100, messages: [user("alpha beta. gamma END delta")], stop_sequences: ["END", "."] });
    expect(m.content).toEqual([{ type: "text", text: "alpha beta", citations: null }]);
    expect(m).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "." });
    const none = await client.messages.create({ model: "offpeak-echo", max_tokens: 100, messages: [user("alpha beta")], stop_sequences: ["zeta"] });
    expect(none).toMatchObject({ stop_reason: "end_turn", stop_sequence: null });
  });

  test("max_tokens: the reply is cut at that many tokens, stop_reason max_tokens", async () => {
    const m = await client.messages.create({ model: "offpeak-echo", max_tokens: 3, messages: [user("one two three four five")] });
    expect(m.content).toEqual([{ type: "text", text: "one two three", citations: null }]);
    expect(m).toMatchObject({ stop_reason: "max_tokens", usage: { output_tokens: 3 } });
  });

  test("messages.stream(): the text arrives as deltas, and the final message is the plain one's", async () => {
    const params = { model: "offpeak-echo", max_tokens: 4, system: "Echo.", messages: [user("stream me these words please")] };
    const plain = await client.messages.create(params);
    const stream = client.messages.stream(params);
    const deltas: string[] = [];
    stream.on("text", (d) => deltas.push(d));
    const final = await stream.finalMessage();
    expect(deltas).toEqual(["stream", " me", " these", " words"]);
    expect(final.id).toMatch(MSG_ID);
    expect({ content: final.content, stop_reason: final.stop_reason, usage: final.usage } as unknown).toEqual({ content: plain.content, stop_reason: plain.stop_reason, usage: plain.usage });
  });

  test("stream: true answers Anthropic's events in order, as named server-sent events", async () => {
    const stream = await client.messages.create({ model: "offpeak-echo", max_tokens: 50, messages: [user("hi there")], stop_sequences: ["there"], stream: true });
    const events: Anthropic.RawMessageStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.type)).toEqual(["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    expect(events[2]).toEqual({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hi " } });
    expect(events[4]).toMatchObject({ delta: { stop_reason: "stop_sequence", stop_sequence: "there" }, usage: { output_tokens: 1 } });
    // On the wire: `event:` lines, a ping after message_start (the SDK drops pings), no [DONE].
    const raw = await fetch(`${t.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": t.admin, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "offpeak-echo", max_tokens: 50, messages: [user("hi")], stream: true }),
    });
    expect(raw.headers.get("content-type")).toStartWith("text/event-stream");
    const text = await raw.text();
    expect([...text.matchAll(/^event: (\w+)$/gm)].map((m) => m[1])).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    expect(text).not.toContain("[DONE]");
  });
});

describe("the key as x-api-key", () => {
  test("opens every route, not only Anthropic's (anthropic-version is ignored); a wrong one is 401", async () => {
    const headers = { "x-api-key": t.admin, "anthropic-version": "2023-06-01" };
    expect((await fetch(`${t.url}/v1/models`, { headers })).status).toBe(200);
    expect((await fetch(`${t.base}/files`, { headers })).status).toBe(200);
    const wrong = await fetch(`${t.url}/v1/models`, { headers: { "x-api-key": "sk-op-wrong" } });
    expect(wrong.status).toBe(401);
    // An OpenAI route answers its failures in OpenAI's shape.
    expect(((await wrong.json()) as any).error.code).toBe("invalid_api_key");
  });
});

describe("the key as x-api-key with front threads (src/http/front)", () => {
  test("a chat completion for an upstream model, answered on a front thread, takes it too", async () => {
    const config = cfg.write("front.json", { upstreams: [{ name: "openai-up", base_url: up.baseUrl, models: ["up-chat"] }] });
    const front = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_HTTP_THREADS: "1" } });
    try {
      const ask = (key: string) =>
        fetch(`${front.url}/v1/chat/completions`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "via a front thread" }] }) });
      const ok = await ask(front.admin);
      expect(ok.status).toBe(200);
      expect(((await ok.json()) as any).choices[0].message.content).toBe("via a front thread");
      expect((await ask("sk-op-wrong")).status).toBe(401);
      const m = await new Anthropic({ baseURL: front.url, apiKey: front.admin, maxRetries: 0 }).messages.create({ model: "up-chat", max_tokens: 10, messages: [user("and a message")] });
      expect(m.content).toEqual([{ type: "text", text: "and a message", citations: null }]);
    } finally {
      await front.stop();
    }
  });
});

describe("an OpenAI-speaking upstream (translated)", () => {
  const tools: Anthropic.Tool[] = [{ name: "get_weather", description: "The weather in a city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];

  test("tool use round trip: the engine's tool call is a tool_use block; the tool_result turn reaches it as a tool message", async () => {
    up.handler = (r) =>
      jsonResponse({
        id: "chatcmpl-up",
        object: "chat.completion",
        created: 1700000000,
        model: "up-chat",
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: null, tool_calls: [{ id: "call_w1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
            finish_reason: "tool_calls",
          },
        ],
        usage: { prompt_tokens: 30, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 16 } },
      });
    const ask = user("What's the weather in Paris?");
    const first = await client.messages.create({ model: "up-chat", max_tokens: 200, messages: [ask], tools, tool_choice: { type: "any" }, ...sampling({ temperature: 0.2, top_k: 20 }) });
    expect(first).toMatchObject({ model: "up-chat", stop_reason: "tool_use", content: [{ type: "tool_use", id: "call_w1", name: "get_weather", input: { city: "Paris" } }] });
    expect(first.usage).toMatchObject({ input_tokens: 14, output_tokens: 9, cache_read_input_tokens: 16 });
    const sent = up.requests[0]!.body;
    expect(sent).toMatchObject({
      model: "up-chat",
      max_tokens: 200,
      temperature: 0.2,
      top_k: 20,
      tool_choice: "required",
      tools: [{ type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: tools[0]!.input_schema } }],
      messages: [{ role: "user", content: "What's the weather in Paris?" }],
    });
    expect(sent.tool_choice).toBe("required");

    up.handler = () =>
      jsonResponse({ id: "chatcmpl-up2", object: "chat.completion", created: 1700000000, model: "up-chat", choices: [{ index: 0, message: { role: "assistant", content: "It is 18°C in Paris." }, finish_reason: "stop" }], usage: { prompt_tokens: 50, completion_tokens: 8 } });
    const second = await client.messages.create({
      model: "up-chat",
      max_tokens: 200,
      tools,
      messages: [ask, { role: "assistant", content: first.content }, user([{ type: "tool_result", tool_use_id: "call_w1", content: "18°C, sunny" }])],
    });
    expect(second).toMatchObject({ stop_reason: "end_turn", content: [{ type: "text", text: "It is 18°C in Paris." }], usage: { input_tokens: 50, output_tokens: 8 } });
    expect(up.requests[1]!.body.messages).toEqual([
      { role: "user", content: "What's the weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_w1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "call_w1", content: "18°C, sunny" },
    ]);
  });

  test("streamed: the engine's chunks become events as they come, a tool call's arguments as input_json_delta", async () => {
    up.handler = (r) =>
      sse([
        ...[
          upstreamChunk("up-chat", { role: "assistant", content: "" }),
          upstreamChunk("up-chat", { content: "Let me check." }),
          upstreamChunk("up-chat", { tool_calls: [{ index: 0, id: "call_s1", type: "function", function: { name: "get_weather", arguments: "" } }] }),
          upstreamChunk("up-chat", { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
          upstreamChunk("up-chat", { tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }),
          upstreamChunk("up-chat", {}, "tool_calls"),
          { id: "x", object: "chat.completion.chunk", created: 1, model: "up-chat", choices: [], usage: { prompt_tokens: 12, completion_tokens: 11 } },
        ].map((c) => `data: ${JSON.stringify(c)}\n\n`),
        "data: [DONE]\n\n",
      ]);
    const stream = client.messages.stream({ model: "up-chat", max_tokens: 100, messages: [user("Weather in Oslo?")], tools });
    const json: string[] = [];
    stream.on("inputJson", (partial) => json.push(partial));
    const final = await stream.finalMessage();
    expect(final.content as unknown).toEqual([
      { type: "text", text: "Let me check.", citations: null },
      { type: "tool_use", id: "call_s1", name: "get_weather", input: { city: "Oslo" } },
    ]);
    expect(json).toEqual(['{"city":', '"Oslo"}']);
    expect(final).toMatchObject({ stop_reason: "tool_use", usage: { input_tokens: 12, output_tokens: 11 } });
    // The engine was asked for a stream with its usage chunk.
    expect(up.requests[0]!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  test("images (base64 and url) reach the engine as image_url parts", async () => {
    await client.messages.create({
      model: "up-chat",
      max_tokens: 10,
      messages: [
        user([
          { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
          { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } },
          { type: "text", text: "Describe these." },
        ]),
      ],
    });
    expect(up.requests[0]!.body.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
          { type: "image_url", image_url: { url: "https://example.com/a.jpg" } },
          { type: "text", text: "Describe these." },
        ],
      },
    ]);
  });

  test("the engine's 4xx comes back with its status, in Anthropic's shape, as the SDK's error class", async () => {
    up.handler = () => jsonResponse({ error: { message: "context length exceeded", type: "invalid_request_error", param: "messages", code: null } }, 400);
    const e = await client.messages.create({ model: "up-chat", max_tokens: 10, messages: [user("x")] }).catch((e) => e);
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.error).toEqual({ type: "error", error: { type: "invalid_request_error", message: "context length exceeded" } });
    expect(e.requestID).toMatch(REQUEST_ID);
  });

  test("count_tokens on its model is a 400 saying it cannot count (nothing is sent upstream)", async () => {
    const e = await client.messages.countTokens({ model: "up-chat", messages: [user("x")] }).catch((e) => e);
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.error.error.message).toContain("cannot count tokens");
    expect(up.requests.length).toBe(0);
  });
});

describe('an upstream with api: "anthropic" (passed through)', () => {
  test("plain: the body goes as sent, the message comes back as the upstream made it", async () => {
    claude.handler = (r) => (r.path === "/messages" ? jsonResponse(upstreamMessage("from claude")) : jsonResponse({ error: { type: "not_found_error", message: r.path } }, 404));
    const m = await client.messages.create({ model: "claude-up", max_tokens: 64, messages: [user("hello")], metadata: { user_id: "u-2" }, ...sampling({ top_k: 5 }) });
    expect(m).toMatchObject(upstreamMessage("from claude"));
    const sent = claude.requests[0]!;
    expect(sent.path).toBe("/messages");
    expect(sent.body).toEqual({ model: "claude-up", max_tokens: 64, messages: [{ role: "user", content: "hello" }], metadata: { user_id: "u-2" }, top_k: 5 });
  });

  test("streamed: the upstream's events pass through", async () => {
    const message = upstreamMessage("");
    claude.handler = () =>
      sse([
        named({ type: "message_start", message: { ...message, content: [], stop_reason: null } }),
        named({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
        named({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "passed " } }),
        named({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "through" } }),
        named({ type: "content_block_stop", index: 0 }),
        named({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } }),
        named({ type: "message_stop" }),
      ]);
    const final = await client.messages.stream({ model: "claude-up", max_tokens: 64, messages: [user("hello")] }).finalMessage();
    expect(final).toMatchObject({ id: "msg_from_the_upstream", content: [{ type: "text", text: "passed through" }], stop_reason: "end_turn", usage: { output_tokens: 2 } });
    expect(claude.requests[0]!.body.stream).toBe(true);
  });

  test("count_tokens is the upstream's; its 4xx comes back as it answered", async () => {
    claude.handler = (r) => (r.path === "/messages/count_tokens" ? jsonResponse({ input_tokens: 42 }) : jsonResponse({}, 500));
    expect(await client.messages.countTokens({ model: "claude-up", messages: [user("count me")] })).toEqual({ input_tokens: 42 });
    claude.handler = () => jsonResponse({ type: "error", error: { type: "invalid_request_error", message: "messages: bad" } }, 400);
    const e = await client.messages.create({ model: "claude-up", max_tokens: 5, messages: [user("x")] }).catch((e) => e);
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.error).toEqual({ type: "error", error: { type: "invalid_request_error", message: "messages: bad" } });
  });

  test("its models are refused on the chat completions route with a 400 saying why; nothing is sent", async () => {
    const res = await t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "claude-up", messages: [{ role: "user", content: "x" }] }) });
    expect(res.status).toBe(400);
    const body = (await res.json()) as any;
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: "model" });
    expect(body.error.message).toContain('api: "anthropic"');
    expect(claude.requests.length).toBe(0);
  });
});

describe('an upstream with api: "anthropic" in an OpenAI batch', () => {
  test("a chat line naming its model fails validation as a model that does not serve the endpoint; nothing is sent", async () => {
    const openai = t.sdk();
    const line = (id: string, model: string) => JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model, messages: [{ role: "user", content: "x" }] } });
    const file = await openai.files.create({ file: new File([`${line("a", "offpeak-echo")}\n${line("b", "claude-up")}\n`], "lines.jsonl"), purpose: "batch" });
    const batch = await openai.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await pollUntil(() => openai.batches.retrieve(batch.id), (b) => !["validating", "in_progress", "finalizing"].includes(b.status), { what: "the batch to end", progress: (b) => b.status });
    expect(done.status).toBe("failed");
    expect(done.errors?.data?.map((e) => [e.line, e.code, e.param])).toEqual([[2, "model_not_found", "body.model"]]);
    expect(claude.requests.length).toBe(0);
  });
});

describe("errors in Anthropic's shape, raised as the SDK's error classes", () => {
  const params = { model: "offpeak-echo", max_tokens: 5, messages: [user("x")] };
  const failure = (p: Promise<unknown>) => p.then(() => null, (e) => e);

  test("401: a wrong key is AuthenticationError, with the request id", async () => {
    const e = await failure(sdk("sk-op-not-a-key").messages.create(params));
    expect(e).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(e.error).toEqual({ type: "error", error: { type: "authentication_error", message: expect.any(String) } });
    expect(e.requestID).toMatch(REQUEST_ID);
    const none = await fetch(`${t.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(params) });
    expect(none.status).toBe(401);
    expect(((await none.json()) as any).error.type).toBe("authentication_error");
    const count = await failure(sdk("sk-op-not-a-key").messages.countTokens({ model: "offpeak-echo", messages: [user("x")] }));
    expect(count).toBeInstanceOf(Anthropic.AuthenticationError);
  });

  test("403: a key without the inference scope is PermissionDeniedError, on both routes", async () => {
    const key = await t.createKey({ name: "files only", scopes: ["files:read"] });
    const e = await failure(sdk(key).messages.create(params));
    expect(e).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(e.error).toEqual({ type: "error", error: { type: "permission_error", message: expect.stringContaining("inference") } });
    expect(await failure(sdk(key).messages.countTokens({ model: "offpeak-echo", messages: [user("x")] }))).toBeInstanceOf(Anthropic.PermissionDeniedError);
  });

  test("404: an unknown model is NotFoundError; so is an unknown route under /v1/messages", async () => {
    const e = await failure(client.messages.create({ ...params, model: "no-such-model" }));
    expect(e).toBeInstanceOf(Anthropic.NotFoundError);
    expect(e.error.error).toEqual({ type: "not_found_error", message: expect.stringContaining("no-such-model") });
    const route = await fetch(`${t.url}/v1/messages/nope`, { method: "POST", headers: { "x-api-key": t.admin } });
    expect(route.status).toBe(404);
    expect(((await route.json()) as any).error.type).toBe("not_found_error");
  });

  test("400: missing max_tokens, a bad block, a body that is not JSON are BadRequestError naming the fault", async () => {
    const missing = await failure(client.messages.create({ model: "offpeak-echo", messages: [user("x")] } as never));
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError);
    expect(missing.error).toEqual({ type: "error", error: { type: "invalid_request_error", message: "max_tokens: Field required" } });
    const block = await failure(client.messages.create({ ...params, messages: [user([{ type: "document", source: { type: "text", media_type: "text/plain", data: "x" } }])] }));
    expect(block).toBeInstanceOf(Anthropic.BadRequestError);
    expect(block.error.error.message).toContain("messages.0.content.0.type");
    const notJson = await fetch(`${t.url}/v1/messages`, { method: "POST", headers: { "x-api-key": t.admin, "content-type": "application/json" }, body: "{not json" });
    expect(notJson.status).toBe(400);
    expect(((await notJson.json()) as any).error.type).toBe("invalid_request_error");
  });

  test("413: a body over max_json_bytes is ContentTooLargeError, type request_too_large", async () => {
    const e = await failure(client.messages.create({ ...params, messages: [user("x".repeat(70_000))] }));
    expect(e).toBeInstanceOf(Anthropic.ContentTooLargeError);
    expect(e.error).toEqual({ type: "error", error: { type: "request_too_large", message: expect.stringContaining("max_json_bytes") } });
  });

  test("5xx: an engine's failure is InternalServerError (api_error); after the stream began, an error event the SDK raises", async () => {
    up.handler = () => jsonResponse({ error: { message: "boom", type: "server_error" } }, 500);
    const e = await failure(client.messages.create({ ...params, model: "up-chat" }));
    expect(e).toBeInstanceOf(Anthropic.InternalServerError);
    expect(e.status).toBe(502);
    expect(e.error).toEqual({ type: "error", error: { type: "api_error", message: expect.stringContaining("openai-up") } });

    up.handler = () => sse([`data: ${JSON.stringify(upstreamChunk("up-chat", { content: "partial" }))}\n\n`, `data: ${JSON.stringify({ error: { message: "engine fell over", type: "server_error", code: null } })}\n\n`]);
    const events: string[] = [];
    const broken = await failure(
      (async () => {
        for await (const ev of await client.messages.create({ ...params, model: "up-chat", stream: true })) events.push(ev.type);
      })(),
    );
    expect(broken).toBeInstanceOf(Anthropic.APIError);
    expect(broken.error).toEqual({ type: "error", error: { type: "api_error", message: "engine fell over" } });
    expect(events).toEqual(["message_start", "content_block_start", "content_block_delta"]);
  });

  test("429: a key over its rpm is RateLimitError, with retry-after (its admitted answer had the x-ratelimit headers)", async () => {
    await awayFromMinuteEnd(10_000);
    const key = await t.createKey({ name: "slow", scopes: ["inference"], rate_limits: { rpm: 1 } } as never);
    const { response } = await sdk(key).messages.create(params).withResponse();
    expect(response.headers.get("x-ratelimit-limit-requests")).toBe("1");
    const e = await failure(sdk(key).messages.create(params));
    expect(e).toBeInstanceOf(Anthropic.RateLimitError);
    expect(e.error).toEqual({ type: "error", error: { type: "rate_limit_error", message: expect.any(String) } });
    expect(e.headers.get("retry-after")).not.toBeNull();
  });
});

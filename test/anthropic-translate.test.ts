// The pure translations between Anthropic's Messages API and Chat
// Completions (src/anthropic/translate.ts, docs/CONTRACT.md §22): request
// → chat request, chat completion → message, chat chunks → message events.
import { describe, expect, test } from "bun:test";
import { ChatStreamTranslator, messageEvents, messages, toChatRequest, toMessage } from "../src/anthropic/translate";
import { ApiError } from "../src/errors";
import { IdStream } from "../src/ids";

const user = (content: unknown) => ({ role: "user", content });
const base = { model: "m", max_tokens: 64 };

function refusal(params: Record<string, unknown>): ApiError {
  try {
    toChatRequest(params);
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error(`no refusal for ${JSON.stringify(params)}`);
}

describe("toChatRequest", () => {
  test("system (a string or text blocks) becomes the first message; the fields map to their chat names; metadata is dropped", () => {
    const chat = toChatRequest({
      ...base,
      system: [
        { type: "text", text: "Be brief." },
        { type: "text", text: "Be kind.", cache_control: { type: "ephemeral" } },
      ],
      messages: [user("hi"), { role: "assistant", content: "hello" }, user("again")],
      stop_sequences: ["END"],
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      metadata: { user_id: "u1" },
    });
    expect(chat).toEqual({
      model: "m",
      messages: [
        { role: "system", content: "Be brief.\nBe kind." },
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello" },
        { role: "user", content: "again" },
      ],
      max_tokens: 64,
      stop: ["END"],
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
    });
    expect(toChatRequest({ ...base, system: "S", messages: [user("x")] }).messages).toEqual([
      { role: "system", content: "S" },
      { role: "user", content: "x" },
    ]);
  });

  test("images (base64 and url sources) become image_url parts beside the text", () => {
    const chat = toChatRequest({
      ...base,
      messages: [
        user([
          { type: "text", text: "What is this?" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
          { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } },
        ]),
      ],
    });
    expect(chat.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
          { type: "image_url", image_url: { url: "https://example.com/cat.jpg" } },
        ],
      },
    ]);
  });

  test("tool_use becomes the assistant's tool_calls; each tool_result a tool message, before the rest of its turn", () => {
    const chat = toChatRequest({
      ...base,
      messages: [
        user("weather?"),
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "…", signature: "s" },
            { type: "text", text: "Let me look." },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
            { type: "tool_use", id: "toolu_2", name: "get_time", input: {} },
          ],
        },
        user([
          { type: "tool_result", tool_use_id: "toolu_1", content: "18°C" },
          { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: "noon" }], is_error: false },
          { type: "text", text: "And tomorrow?" },
        ]),
      ],
    });
    expect(chat.messages).toEqual([
      { role: "user", content: "weather?" },
      {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [
          { id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "toolu_2", type: "function", function: { name: "get_time", arguments: "{}" } },
        ],
      },
      { role: "tool", tool_call_id: "toolu_1", content: "18°C" },
      { role: "tool", tool_call_id: "toolu_2", content: "noon" },
      { role: "user", content: [{ type: "text", text: "And tomorrow?" }] },
    ]);
    // An assistant turn of tool calls alone has no text: content null, as chat engines expect.
    const only = toChatRequest({ ...base, messages: [user("x"), { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: { a: 1 } }] }] });
    expect((only.messages as any[])[1].content).toBeNull();
  });

  test("tools become function tools; each tool_choice has its chat form; stream asks for the usage chunk", () => {
    const tools = [{ name: "get_weather", description: "Weather by city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
    const fn = { type: "function", function: { name: "get_weather", description: "Weather by city", parameters: tools[0]!.input_schema } };
    const of = (tool_choice: unknown) => toChatRequest({ ...base, messages: [user("x")], tools, tool_choice });
    expect(of({ type: "auto" })).toMatchObject({ tools: [fn], tool_choice: "auto" });
    expect(of({ type: "any" }).tool_choice).toBe("required");
    expect(of({ type: "none" }).tool_choice).toBe("none");
    expect(of({ type: "tool", name: "get_weather", disable_parallel_tool_use: true })).toMatchObject({
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
    });
    expect(toChatRequest({ ...base, messages: [user("x")], stream: true })).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(toChatRequest({ ...base, messages: [user("x")], stream: false }).stream).toBeUndefined();
  });

  test("what cannot be translated is refused naming the field (400)", () => {
    const cases: [Record<string, unknown>, string, string][] = [
      [{ model: "m", messages: [user("x")] }, "max_tokens", "missing_field"],
      [{ ...base, max_tokens: 0 }, "max_tokens", "invalid_value"],
      [{ model: "m", max_tokens: 5, messages: undefined }, "messages", "missing_field"],
      [{ ...base, messages: [] }, "messages", "invalid_value"],
      [{ ...base, messages: [{ role: "system", content: "x" }] }, "messages.0.role", "invalid_value"],
      [{ ...base, messages: [user(5)] }, "messages.0.content", "invalid_value"],
      [{ ...base, messages: [user([{ type: "document", source: {} }])] }, "messages.0.content.0.type", "invalid_value"],
      [{ ...base, messages: [user([{ type: "image", source: { type: "file", file_id: "f" } }])] }, "messages.0.content.0.source.type", "invalid_value"],
      [{ ...base, messages: [user([{ type: "tool_result", content: "x" }])] }, "messages.0.content.0.tool_use_id", "invalid_value"],
      [{ ...base, messages: [user("x")], system: 5 }, "system", "invalid_value"],
      [{ ...base, messages: [user("x")], stop_sequences: "END" }, "stop_sequences", "invalid_value"],
      [{ ...base, messages: [user("x")], temperature: 1.5 }, "temperature", "invalid_value"],
      [{ ...base, messages: [user("x")], top_k: -1 }, "top_k", "invalid_value"],
      [{ ...base, messages: [user("x")], tools: [{ name: "f" }] }, "tools.0.input_schema", "invalid_value"],
      [{ ...base, messages: [user("x")], tools: [{ type: "web_search_20250305", name: "web_search" }] }, "tools.0.type", "invalid_value"],
      [{ ...base, messages: [user("x")], tool_choice: { type: "sometimes" } }, "tool_choice.type", "invalid_value"],
      [{ ...base, messages: [user("x")], stream: "yes" }, "stream", "invalid_value"],
    ];
    for (const [params, param, code] of cases) {
      const e = refusal({ messages: [user("x")], ...params });
      expect({ param: e.param, code: e.code, status: e.status }).toEqual({ param, code, status: 400 } as any);
      expect(e.message).toContain(param);
    }
    // count_tokens takes no max_tokens.
    expect(toChatRequest({ model: "m", messages: [user("x")] }, { requireMaxTokens: false }).max_tokens).toBeUndefined();
  });
});

const completion = (message: Record<string, unknown>, finish: string, extra: Record<string, unknown> = {}, usage: Record<string, unknown> = { prompt_tokens: 10, completion_tokens: 4 }) => ({
  id: "chatcmpl-x",
  object: "chat.completion",
  model: "engine-name",
  choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish, ...extra }],
  usage,
});

describe("toMessage", () => {
  test("text, the client's model name, end_turn, usage with cache reads apart from input_tokens", () => {
    const m = toMessage(completion({ content: "Hello" }, "stop", {}, { prompt_tokens: 10, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 6 } }), { model: "my-model" });
    expect(m.id).toMatch(/^msg_[0-9A-Za-z]{24}$/);
    expect(m).toMatchObject({
      type: "message",
      role: "assistant",
      model: "my-model",
      content: [{ type: "text", text: "Hello" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 4, output_tokens: 4, cache_read_input_tokens: 6 },
    });
    expect(toMessage(completion({ content: "x" }, "stop")).usage.cache_read_input_tokens).toBeNull();
  });

  test("stop reasons: length → max_tokens, a named stop string → stop_sequence, tool calls → tool_use blocks with parsed input", () => {
    expect(toMessage(completion({ content: "a b" }, "length")).stop_reason).toBe("max_tokens");
    expect(toMessage(completion({ content: "a" }, "stop", { stop_reason: "END" }))).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
    // vLLM names a stop token by its id (a number): no stop string is known.
    expect(toMessage(completion({ content: "a" }, "stop", { stop_reason: 128009 }))).toMatchObject({ stop_reason: "end_turn", stop_sequence: null });
    const tools = toMessage(
      completion(
        {
          content: null,
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            { id: "call_2", type: "function", function: { name: "broken", arguments: "{not json" } },
          ],
        },
        "tool_calls",
      ),
    );
    expect(tools.content).toEqual([
      { type: "tool_use", id: "call_1", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_2", name: "broken", input: {} },
    ]);
    expect(tools.stop_reason).toBe("tool_use");
  });
});

/** The events of a chunk list, start to end. */
function run(chunks: unknown[], head = { id: "msg_1", model: "m", inputTokens: 9 }) {
  const t = new ChatStreamTranslator(head);
  return [...t.start(), ...chunks.flatMap((c) => t.push(c)), ...t.end()];
}
const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) => ({ choices: [{ index: 0, delta, finish_reason: finish, ...extra }] });

describe("ChatStreamTranslator", () => {
  test("text deltas: message_start, ping, one text block, message_delta with the usage chunk's counts, message_stop", () => {
    const events = run([chunk({ role: "assistant", content: "" }), chunk({ content: "Hel" }), chunk({ content: "lo" }), chunk({}, "stop"), { choices: [], usage: { prompt_tokens: 11, completion_tokens: 2 } }]);
    expect(events.map((e) => e.type)).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    expect(events[0]).toMatchObject({ message: { id: "msg_1", model: "m", content: [], stop_reason: null, usage: { input_tokens: 9, output_tokens: 0 } } });
    expect(events[2]).toEqual({ type: "content_block_start", index: 0, content_block: { type: "text", text: "", citations: null } });
    expect(events[3]).toEqual({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } });
    expect(events[6]).toMatchObject({ delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2, input_tokens: 11 } });
  });

  test("text then two tool calls: a block each, arguments as input_json_delta; stop_reason tool_use; without a usage chunk the output is counted", () => {
    const events = run([
      chunk({ content: "Checking." }),
      chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "get_time", arguments: "{}" } }] }),
      chunk({}, "tool_calls"),
    ]);
    expect(events.filter((e) => e.type === "content_block_start").map((e) => e.content_block)).toEqual([
      { type: "text", text: "", citations: null },
      { type: "tool_use", id: "call_a", name: "get_weather", input: {} },
      { type: "tool_use", id: "call_b", name: "get_time", input: {} },
    ]);
    const json = events.filter((e) => (e.delta as any)?.type === "input_json_delta").map((e) => [e.index, (e.delta as any).partial_json]);
    expect(json).toEqual([
      [1, '{"city":'],
      [1, '"Paris"}'],
      [2, "{}"],
    ]);
    // Each block is stopped before the next starts.
    const order = events.filter((e) => e.type.startsWith("content_block_") && e.type !== "content_block_delta").map((e) => `${e.type.slice(14)}${e.index}`);
    expect(order).toEqual(["start0", "stop0", "start1", "stop1", "start2", "stop2"]);
    const delta = events.find((e) => e.type === "message_delta")!;
    expect(delta.delta).toMatchObject({ stop_reason: "tool_use" });
    expect((delta.usage as any).output_tokens).toBeGreaterThan(0);
  });

  test("the stop string the engine names is the stop_sequence; length is max_tokens", () => {
    expect(run([chunk({ content: "a" }), chunk({}, "stop", { stop_reason: "." })]).find((e) => e.type === "message_delta")!.delta).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "." });
    expect(run([chunk({ content: "a" }), chunk({}, "length")]).find((e) => e.type === "message_delta")!.delta).toMatchObject({ stop_reason: "max_tokens" });
  });

  test("messageEvents gives a whole message's events, which add up to it", () => {
    const m = toMessage(completion({ content: "Hi", tool_calls: [{ id: "c1", function: { name: "f", arguments: '{"a":1}' } }] }, "tool_calls"));
    const events = messageEvents(m);
    expect(events.map((e) => e.type)).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    expect(events[6]!.delta).toEqual({ type: "input_json_delta", partial_json: '{"a":1}' });
    expect(events[8]).toMatchObject({ delta: { stop_reason: "tool_use" }, usage: { output_tokens: 4 } });
  });
});

describe("the messages endpoint kind", () => {
  test("offpeak-echo's answer to a Messages body is a message; usage is read in Anthropic's shape (cache reads and writes count as input)", () => {
    const answer = messages.answer({ model: "offpeak-echo", max_tokens: 2, messages: [user("one two three")] }, new IdStream(), 0) as any;
    expect(answer).toMatchObject({ type: "message", model: "offpeak-echo", content: [{ type: "text", text: "one two" }], stop_reason: "max_tokens", usage: { output_tokens: 2 } });
    const into = { input: 0, output: 0, cached: 0, reasoning: 0 };
    messages.readUsage({ input_tokens: 5, output_tokens: 3, cache_read_input_tokens: 10, cache_creation_input_tokens: 2 }, into);
    expect(into).toEqual({ input: 17, output: 3, cached: 10, reasoning: 0 });
    const tally = { reported: null as number | null, estimated: 0 };
    messages.readStreamEvent!({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "two words" } }, tally);
    expect(tally.estimated).toBe(2);
    messages.readStreamEvent!({ type: "message_delta", delta: {}, usage: { output_tokens: 7 } }, tally);
    expect(tally.reported).toBe(7);
  });
});

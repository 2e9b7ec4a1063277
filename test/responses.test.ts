// docs/CONTRACT.md §13: POST /responses with the official `openai` SDK — offpeak-echo
// (a deterministic response object; the Responses event stream with rising
// sequence_number; max_output_tokens → incomplete; reasoning), and upstream
// models passed through (a fake engine for the SDK, a scripted one for
// causality, aborts, errors, 529 and a down upstream); 400s naming the
// field; 401/403/404; rate limits, metrics and the OpenAPI document.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { REQUEST_ID, configWriter, deferred, eventually, expectError, json, jsonResponse, pushStream, sseReader, startScriptedUpstream, within, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { clearOfMinuteEnd } from "./helpers/wait";
import { freePort } from "./helpers/env";

const RESP_ID = /^resp_[0-9A-Za-z]{24}$/;
const MSG_ID = /^msg_[0-9A-Za-z]{24}$/;
/** offpeak-echo streams at this many tokens per second here, so a stream's events are seen to arrive over time. */
const TPS = 100;

let t: TestServer;
let fake: FakeUpstream;
let up: ScriptedUpstream;
let client: OpenAI;
const cfg = configWriter("offpeak-responses-");

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-model"] });
  up = await startScriptedUpstream({ models: ["up-resp", "tight-resp"] });
  const dead = freePort();
  const config = cfg.write("responses.json", {
    upstreams: [
      { name: "fake", base_url: fake.baseUrl, models: ["fake-model"] },
      { name: "scripted", base_url: up.baseUrl, models: ["up-resp"], model_map: { "up-resp": "engine/real-name" } },
      { name: "tight", base_url: up.baseUrl, models: ["tight-resp"], max_concurrency: 1, queue_size: 0 },
      { name: "dead", base_url: `http://127.0.0.1:${dead}/v1`, models: ["dead-resp"] },
    ],
    models: { "offpeak-echo": { tokens_per_second: TPS } },
  });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  await up?.stop();
  cfg.cleanup();
});
beforeEach(() => {
  up.reset();
  fake.reset();
});

const post = (body: unknown, init: { key?: string | null; signal?: AbortSignal; base?: string } = {}) =>
  init.base
    ? fetch(`${t.url}${init.base}/responses`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${init.key ?? t.admin}` }, body: JSON.stringify(body), signal: init.signal })
    : t.api("/responses", { method: "POST", key: init.key, signal: init.signal, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

/** Words and punctuation, as offpeak counts tokens. */
const tokens = (s: string) => (s.match(/[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) ?? []).length;

/** A response object without what differs between two equal requests (ids and times). */
function stable(r: any) {
  const { id, created_at, completed_at, output, ...rest } = r;
  return { ...rest, output: output.map(({ id, ...item }: any) => item) };
}

describe("offpeak-echo, plain", () => {
  test("the SDK's responses.create: a response object whose one message is the input, with usage", async () => {
    const r = await client.responses.create({ model: "offpeak-echo", input: "Hello there, responses!" });
    expect(r.id).toMatch(RESP_ID);
    expect(r.object).toBe("response");
    expect(r.status).toBe("completed");
    expect(r.model).toBe("offpeak-echo");
    expect(r.error).toBeNull();
    expect(r.incomplete_details).toBeNull();
    expect(r.output_text).toBe("Hello there, responses!");
    expect(r.output).toHaveLength(1);
    const msg = r.output[0] as any;
    expect(msg).toEqual({ id: expect.stringMatching(MSG_ID), type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hello there, responses!", annotations: [], logprobs: [] }] });
    // A string input is one user message: its tokens plus 3 of framing.
    const out = tokens("Hello there, responses!");
    expect(r.usage).toEqual({ input_tokens: out + 3, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: out, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 2 * out + 3 });
    expect(typeof r.created_at).toBe("number");
    expect(Number.isInteger(r.created_at)).toBe(true);
    // Nothing is stored, and a field without a value is null, not missing.
    const raw = await json(await post({ model: "offpeak-echo", input: "x", store: true }));
    expect(raw.store).toBe(false);
    for (const k of ["instructions", "max_output_tokens", "previous_response_id", "user", "incomplete_details", "error"]) expect(raw[k]).toBeNull();
  });

  test("the whole object: every field, in OpenAI's order; the request's own values echoed back; text that needs escaping", async () => {
    const plain = await json(await post({ model: "offpeak-echo", input: 'quote " backslash \\ newline \n tab \t emoji 😀 nul \u0000 end' }));
    expect(Object.keys(plain)).toEqual([
      "id", "object", "created_at", "status", "background", "completed_at", "error", "incomplete_details", "instructions", "max_output_tokens", "model", "output",
      "parallel_tool_calls", "previous_response_id", "reasoning", "store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "usage", "user", "metadata",
    ]);
    expect(plain).toMatchObject({
      background: false, error: null, incomplete_details: null, instructions: null, max_output_tokens: null, parallel_tool_calls: true, previous_response_id: null,
      reasoning: { effort: null, summary: null }, store: false, temperature: 1, text: { format: { type: "text" } }, tool_choice: "auto", tools: [], top_p: 1,
      truncation: "disabled", user: null, metadata: {},
    });
    expect(plain.completed_at).toBeGreaterThanOrEqual(plain.created_at);
    expect(plain.output[0].content[0].text).toBe('quote " backslash \\ newline \n tab \t emoji 😀 nul \u0000 end');
    const set = {
      instructions: "say \"it\"",
      max_output_tokens: 100,
      parallel_tool_calls: false,
      reasoning: { effort: "minimal", summary: "auto" },
      temperature: 0,
      text: { format: { type: "json_schema", name: "x", schema: { type: "object" } }, verbosity: "low" },
      tool_choice: { type: "function", name: "f" },
      tools: [{ type: "function", name: "f", parameters: { type: "object", properties: {} } }],
      top_p: 0.5,
      truncation: "auto",
      user: "u-1",
      metadata: { a: "b" },
    };
    const echoed = await json(await post({ model: "offpeak-echo", input: "x", ...set }));
    expect(echoed).toMatchObject(set);
    expect(echoed.output.map((o: any) => o.type)).toEqual(["reasoning", "message"]);
  });

  test("items: the last user message answers, text parts join with a newline, instructions and every message count as input", async () => {
    const body = {
      model: "offpeak-echo",
      instructions: "Answer briefly.",
      input: [
        { role: "developer", content: "Be kind." },
        { role: "user", content: "first question" },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "first answer" }] },
        { role: "user", content: [{ type: "input_text", text: "second" }, { type: "input_text", text: "question" }] },
      ],
      metadata: { run: "items" },
      temperature: 0.5,
    };
    const r = await json(await post(body));
    expect(r.output[0].content[0].text).toBe("second\nquestion");
    const input = tokens("Answer briefly.") + tokens("Be kind.") + tokens("first question") + tokens("first answer") + tokens("second question") + 5 * 3;
    expect(r.usage.input_tokens).toBe(input);
    expect(r.usage.output_tokens).toBe(2);
    // What the request set is echoed back, as OpenAI does.
    expect(r.instructions).toBe("Answer briefly.");
    expect(r.metadata).toEqual({ run: "items" });
    expect(r.temperature).toBe(0.5);
    // Deterministic: the same request, the same answer (ids and times apart).
    expect(stable(await json(await post(body)))).toEqual(stable(r));
  });

  test("max_output_tokens cuts the text: status incomplete, incomplete_details.reason max_output_tokens", async () => {
    const r = await client.responses.create({ model: "offpeak-echo", input: "one two three four five six", max_output_tokens: 3 });
    expect(r.status).toBe("incomplete");
    expect(r.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(r.output_text).toBe("one two three");
    expect((r.output[0] as any).status).toBe("incomplete");
    expect(r.usage!.output_tokens).toBe(3);
    expect(r.max_output_tokens).toBe(3);
    // At or over the text's length: complete.
    const whole = await client.responses.create({ model: "offpeak-echo", input: "one two three", max_output_tokens: 3 });
    expect(whole.status).toBe("completed");
    expect(whole.output_text).toBe("one two three");
  });

  test("reasoning.effort: a reasoning item first, counted in output_tokens_details.reasoning_tokens (and against max_output_tokens)", async () => {
    const r = await client.responses.create({ model: "offpeak-echo", input: "think about it", reasoning: { effort: "medium" } });
    expect(r.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    const reasoning = r.output[0] as any;
    expect(reasoning.id).toMatch(/^rs_[0-9A-Za-z]{24}$/);
    const text = reasoning.content[0].text as string;
    expect(text).toContain("The user wrote 3 tokens.");
    expect(r.output_text).toBe("think about it");
    expect(r.usage!.output_tokens_details.reasoning_tokens).toBe(tokens(text));
    expect(r.usage!.output_tokens).toBe(tokens(text) + 3);
    expect(r.reasoning).toEqual({ effort: "medium", summary: null });
    // The budget runs out in the reasoning: incomplete, with an empty message.
    const cut = await client.responses.create({ model: "offpeak-echo", input: "think about it", reasoning: { effort: "medium" }, max_output_tokens: 4 });
    expect(cut.status).toBe("incomplete");
    expect(cut.usage!.output_tokens).toBe(4);
    expect(cut.usage!.output_tokens_details.reasoning_tokens).toBe(4);
    expect(cut.output_text).toBe("");
    // effort none: no reasoning.
    const none = await client.responses.create({ model: "offpeak-echo", input: "x", reasoning: { effort: "none" } });
    expect(none.output.map((o) => o.type)).toEqual(["message"]);
  });
});

const EXPECTED_TYPES = (deltas: number, end = "response.completed") => [
  "response.created",
  "response.in_progress",
  "response.output_item.added",
  "response.content_part.added",
  ...Array(deltas).fill("response.output_text.delta"),
  "response.output_text.done",
  "response.content_part.done",
  "response.output_item.done",
  end,
];

describe("offpeak-echo, streamed", () => {
  test("the SDK's responses.create({stream:true}): OpenAI's event sequence, rising sequence_number, deltas adding up, arriving over time", async () => {
    const input = "The quick brown fox jumps over the lazy dog again";
    const stream = await client.responses.create({ model: "offpeak-echo", input, stream: true });
    const events: any[] = [];
    const arrived: number[] = [];
    for await (const ev of stream) {
      events.push(ev);
      arrived.push(performance.now());
    }
    const n = tokens(input);
    expect(events.map((e) => e.type)).toEqual(EXPECTED_TYPES(n));
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const deltas = events.filter((e) => e.type === "response.output_text.delta");
    expect(deltas.map((d) => d.delta).join("")).toBe(input);
    expect(events.find((e) => e.type === "response.output_text.done").text).toBe(input);
    // Incremental: the deltas come at the model's pace (TPS), not all at once at the end.
    const di = events.findIndex((e) => e.type === "response.output_text.delta");
    expect(arrived[di + n - 1]! - arrived[di]!).toBeGreaterThan(((n - 1) * 1000) / TPS / 2);
    const created = events[0].response;
    expect(created.status).toBe("in_progress");
    expect(created.output).toEqual([]);
    expect(created.usage).toBeNull();
    // The start object (built apart from the finished one's JSON text) has the same fields, in order.
    expect(Object.keys(created)).toEqual(Object.keys(events.at(-1).response));
    const final = events.at(-1).response;
    expect(final.id).toBe(created.id);
    expect(final.status).toBe("completed");
    expect(final.output[0].content[0].text).toBe(input);
    expect(final.output[0].id).toBe(deltas[0].item_id);
    // The stream's final object is the plain answer.
    expect(stable(final)).toEqual(stable(await json(await post({ model: "offpeak-echo", input }))));
  });

  test("the wire format: named events (event: <type>), no [DONE]", async () => {
    const res = await post({ model: "offpeak-echo", input: "a b", stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    const text = await res.text();
    const blocks = text.split("\n\n").filter((b) => b !== "");
    for (const b of blocks) {
      const [ev, data] = b.split("\n");
      expect(ev!.startsWith("event: ")).toBe(true);
      expect(JSON.parse(data!.slice("data: ".length)).type).toBe(ev!.slice("event: ".length));
    }
    expect(text).not.toContain("[DONE]");
  });

  test("the SDK's responses.stream(...).finalResponse() and its delta events", async () => {
    const seen: string[] = [];
    const stream = client.responses.stream({ model: "offpeak-echo", input: [{ role: "user", content: "stream me please" }], reasoning: { effort: "low" } });
    stream.on("response.output_text.delta", (e) => seen.push(e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe("stream me please");
    expect(seen.join("")).toBe("stream me please");
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect((final.output[0] as any).content[0].text).toContain("The user wrote 3 tokens.");
    expect(final.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
  });

  test("max_output_tokens in a stream: the last event is response.incomplete", async () => {
    const stream = await client.responses.create({ model: "offpeak-echo", input: "one two three four", max_output_tokens: 2, stream: true });
    const events: any[] = [];
    for await (const ev of stream) events.push(ev);
    expect(events.map((e) => e.type)).toEqual(EXPECTED_TYPES(2, "response.incomplete"));
    const last = events.at(-1).response;
    expect(last.status).toBe("incomplete");
    expect(last.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(last.output[0].content[0].text).toBe("one two");
  });

  test("a client that leaves mid-stream frees the model's slot", async () => {
    // 3000 tokens at TPS (100/s): 30 s if nobody stopped it, far longer than the 3 s allowed below, so
    // only the client's leaving can free the slot in time.
    const inFlight = async () => (await json(await t.api("/status"))).models.find((m: any) => m.id === "offpeak-echo").in_flight;
    const abort = new AbortController();
    const res = await post({ model: "offpeak-echo", input: Array(3000).fill("word").join(" "), stream: true }, { signal: abort.signal });
    const reader = sseReader(res);
    await reader.nextData();
    expect(await inFlight()).toBe(1);
    // Read on until the client leaves (a body left unread to the garbage collector may be closed without the abort).
    const reading = (async () => {
      try {
        while (await reader.next());
      } catch {}
    })();
    abort.abort();
    await eventually(async () => (await inFlight()) === 0, "the slot to be released", 3000);
    await reading;
  });
});

describe("bad input: 400 naming the field, 404 for models", () => {
  test("each bad field is named (param), with the OpenAI error shape", async () => {
    const cases: [Record<string, unknown>, string, string?][] = [
      [{ model: "offpeak-echo" }, "input", "missing_field"],
      [{ model: "offpeak-echo", input: null }, "input", "missing_field"],
      [{ model: "offpeak-echo", input: 5 }, "input"],
      [{ model: "offpeak-echo", input: [] }, "input"],
      [{ model: "offpeak-echo", input: ["hi"] }, "input[0]"],
      [{ model: "offpeak-echo", input: [{ role: "robot", content: "x" }] }, "input[0].role"],
      [{ model: "offpeak-echo", input: [{ role: "user", content: "ok" }, { role: "user", content: 5 }] }, "input[1].content"],
      [{ model: "offpeak-echo", input: "x", previous_response_id: "resp_AAAAAAAAAAAAAAAAAAAAAAAA" }, "previous_response_id"],
      [{ model: "offpeak-echo", input: "x", conversation: "conv_1" }, "conversation"],
      [{ model: "offpeak-echo", input: "x", max_output_tokens: 0 }, "max_output_tokens"],
      [{ model: "offpeak-echo", input: "x", max_output_tokens: "ten" }, "max_output_tokens"],
      [{ model: "offpeak-echo", input: "x", reasoning: { effort: "extreme" } }, "reasoning.effort"],
      [{ model: "offpeak-echo", input: "x", reasoning: "high" }, "reasoning"],
      [{ model: "offpeak-echo", input: "x", instructions: 5 }, "instructions"],
      [{ model: "offpeak-echo", input: "x", temperature: 3 }, "temperature"],
      [{ model: "offpeak-echo", input: "x", stream: "yes" }, "stream"],
      [{ input: "x" }, "model", "missing_field"],
    ];
    for (const [body, param, code] of cases) await expectError(await post(body), 400, { param, ...(code ? { code } : {}) });
    // Malformed JSON.
    await expectError(await t.api("/responses", { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" }), 400);
    // The SDK raises a BadRequestError.
    const err = await client.responses.create({ model: "offpeak-echo" } as any).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.status).toBe(400);
    expect(err.param).toBe("input");
  });

  test("unknown models, and models that do not serve responses: 404 model_not_found", async () => {
    await expectError(await post({ model: "no-such-model", input: "x" }), 404, { code: "model_not_found", param: "model" });
    await expectError(await post({ model: "offpeak-embed", input: "x" }), 404, { code: "model_not_found", param: "model" });
  });

  test("unknown fields are accepted (and ignored by offpeak-echo)", async () => {
    const r = await json(await post({ model: "offpeak-echo", input: "fine", some_new_field: { a: 1 }, tools: [], text: { format: { type: "text" } } }));
    expect(r.output[0].content[0].text).toBe("fine");
  });
});

describe("auth and routes", () => {
  test("401 without a valid key, 403 without the inference scope, under both bases; nothing else answers /responses", async () => {
    const filesOnly = await t.createKey({ name: "files-only", scopes: ["files:read", "files:write"] });
    const inference = await t.createKey({ name: "inference-only", scopes: ["inference"] });
    for (const base of ["/api/v1", "/v1"]) {
      const body = { model: "offpeak-echo", input: "x" };
      const none = await fetch(`${t.url}${base}/responses`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(none.headers.get("www-authenticate")).toMatch(/^Bearer/);
      await expectError(none, 401, { code: "invalid_api_key" });
      await expectError(await post(body, { base, key: "sk-op-not-a-real-key-000000000000000000000000" }), 401);
      await expectError(await post(body, { base, key: filesOnly }), 403, { code: "insufficient_scope" });
      const ok = await post(body, { base, key: inference });
      expect(ok.status).toBe(200);
      expect((await json(ok)).output[0].content[0].text).toBe("x");
      // offpeak keeps no responses: retrieving one is an unknown route.
      await expectError(await fetch(`${t.url}${base}/responses/resp_AAAAAAAAAAAAAAAAAAAAAAAA`, { headers: { authorization: `Bearer ${t.admin}` } }), 404);
    }
    // The SDK with a key lacking the scope.
    const err = await t.sdk(filesOnly).responses.create({ model: "offpeak-echo", input: "x" }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError);
  });
});

describe("upstream models: passed through", () => {
  test("the SDK against an engine: the answer is the engine's, the engine gets the body untouched but for the model name", async () => {
    const r = await client.responses.create({ model: "fake-model", input: "from the engine", instructions: "be an engine" });
    expect(r.id).toMatch(/^resp_fake/);
    expect(r.output_text).toBe("from the engine");
    expect(r.usage).toEqual({ input_tokens: 6, input_tokens_details: { cached_tokens: 1, cache_write_tokens: 0 }, output_tokens: 3, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 9 });
    expect(fake.counts.get("from the engine")).toBe(1);
  });

  test("the SDK streams through an engine: events and finalResponse", async () => {
    const stream = await client.responses.create({ model: "fake-model", input: "streamed via the engine", stream: true });
    const events: any[] = [];
    for await (const ev of stream) events.push(ev);
    expect(events[0].type).toBe("response.created");
    expect(events.at(-1).type).toBe("response.completed");
    expect(events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("")).toBe("streamed via the engine");
    const final = await client.responses.stream({ model: "fake-model", input: "final via the engine" }).finalResponse();
    expect(final.output_text).toBe("final via the engine");
  });

  test("fields offpeak does not read reach the engine as sent (previous_response_id, store, tools, unknown ones); the model name is mapped", async () => {
    up.handler = (r) => jsonResponse({ id: "resp_up", object: "response", status: "completed", output: [], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 }, echo: r.body });
    const body = { model: "up-resp", input: [{ role: "user", content: "x" }], previous_response_id: "resp_prev", store: true, tools: [{ type: "function", name: "f", parameters: {} }], future_field: { nested: [1, 2] } };
    const r = await json(await post(body));
    expect(r.id).toBe("resp_up");
    const sent = up.requests[0]!;
    expect(sent.path).toBe("/responses");
    expect(sent.body).toEqual({ ...body, model: "engine/real-name" });
  });

  test("events pass through as they arrive: the client has the first before the engine sends the rest; a client abort cancels the engine's request", async () => {
    let s: ReturnType<typeof pushStream> | undefined;
    const sent = deferred();
    up.handler = (r) => {
      s = pushStream(r);
      s.send(`event: response.created\ndata: ${JSON.stringify({ type: "response.created", sequence_number: 0, response: { id: "resp_up", status: "in_progress", output: [] } })}\n\n`);
      sent.resolve();
      return s.response;
    };
    const abort = new AbortController();
    const res = await post({ model: "up-resp", input: "long", stream: true }, { signal: abort.signal });
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    const first = await within(reader.next(), 5000, "the first event");
    expect(JSON.parse(first!.data!).type).toBe("response.created");
    // Whole events, as sent: its event: line came with it.
    expect(reader.raw).toStartWith("event: response.created\n");
    expect(s!.send(`event: response.output_text.delta\ndata: ${JSON.stringify({ type: "response.output_text.delta", sequence_number: 1, delta: "lo" })}\n\n`)).toBe(true);
    expect(JSON.parse((await within(reader.next(), 5000, "the second event"))!.data!).delta).toBe("lo");
    abort.abort();
    await within(s!.cancelled, 5000, "the engine to see its request cancelled");
    await eventually(async () => (await json(await t.api("/status"))).models.find((m: any) => m.id === "up-resp").in_flight === 0, "the slot to be released");
  });

  test("engine errors before the first byte: 4xx passes through, 5xx → 502, both as JSON with their status", async () => {
    up.handler = () => jsonResponse({ error: { message: "input is required", type: "invalid_request_error", param: "input", code: "missing_required_parameter" } }, 400);
    await expectError(await post({ model: "up-resp" }), 400, { param: "input", code: "missing_required_parameter" });
    await expectError(await post({ model: "up-resp", stream: true, input: "x" }), 400, { param: "input" });
    up.handler = () => jsonResponse({ error: { message: "boom", type: "server_error", param: null, code: null } }, 500);
    await expectError(await post({ model: "up-resp", input: "x" }), 502, { type: "server_error" });
  });

  test("a down engine answers 503 upstream_unavailable at once, with retry-after", async () => {
    const t0 = performance.now();
    const res = await post({ model: "dead-resp", input: "x" });
    expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    await expectError(res, 503, { type: "server_error", code: "upstream_unavailable" });
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  test("a full queue answers 529 at once", async () => {
    const release = deferred();
    const reached = deferred();
    up.handler = async () => {
      reached.resolve();
      await release.promise;
      return jsonResponse({ id: "resp_slow", object: "response", status: "completed", output: [] });
    };
    const first = post({ model: "tight-resp", input: "A" });
    await within(reached.promise, 5000, "the first request to reach the engine");
    const second = await within(post({ model: "tight-resp", input: "B" }), 5000, "the second to be refused");
    expect(second.headers.get("retry-after")).toMatch(/^\d+$/);
    await expectError(second, 529, { code: "overloaded" });
    release.resolve();
    expect((await first).status).toBe(200);
  });
});

describe("rate limits, metrics, docs", () => {
  test("rpm and tpm apply; every answer carries x-ratelimit-*; a refused one is 429 with retry-after", async () => {
    await clearOfMinuteEnd();
    const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "rl", scopes: ["inference"], rate_limits: { rpm: 2, tpm: 100000 } }) });
    const key = (await json(res)).key;
    const a = await post({ model: "offpeak-echo", input: "one" }, { key });
    expect(a.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect(a.headers.get("x-ratelimit-limit-tokens")).toBe("100000");
    // A bad request costs nothing but carries the headers.
    const bad = await post({ model: "offpeak-echo" }, { key });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect((await post({ model: "fake-model", input: "two" }, { key })).status).toBe(200);
    const over = await post({ model: "offpeak-echo", input: "three" }, { key });
    expect(over.headers.get("retry-after")).toMatch(/^\d+$/);
    await expectError(over, 429, { code: "rate_limit_exceeded" });
    // tpm: input and output tokens count.
    const tk = (await json(await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "tpm", scopes: ["inference"], rate_limits: { tpm: 40 } }) }))).key;
    const long = Array(15).fill("word").join(" ");
    expect((await post({ model: "offpeak-echo", input: long }, { key: tk })).status).toBe(200); // 18 in + 15 out
    await expectError(await post({ model: "offpeak-echo", input: long }, { key: tk }), 429);
  });

  test("/metrics counts the route; /docs describes it", async () => {
    expect((await post({ model: "offpeak-echo", input: "m" })).status).toBe(200);
    const metrics = await (await t.api("/metrics")).text();
    expect(metrics).toMatch(/offpeak_http_requests_total\{method="POST",route="\/api\/v1\/responses",status="200"\} [1-9]/);
    const doc = await json(await fetch(`${t.url}/docs/json`));
    const op = doc.paths["/api/v1/responses"]?.post;
    expect(op).toBeDefined();
    expect(JSON.stringify(op)).toContain("max_output_tokens");
  });
});

// docs/CONTRACT.md §6: the built-in `offpeak-echo` chat model through the official
// `openai` SDK and raw fetch — the exact chat.completion shape with real
// usage, streaming (chunks, include_usage, `data: [DONE]`), max_tokens /
// max_completion_tokens → "length", n, stop, and reasoning_effort (a
// deterministic reasoning_content before the answer, counted as reasoning
// tokens), plain and streamed.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { startTestServer, type TestServer } from "./helpers/server";
import { CHATCMPL_ID, REQUEST_ID, json, readAllSse } from "./helpers/inference";

let t: TestServer;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
});

const now = () => Math.floor(Date.now() / 1000);
const post = (path: string, body: unknown) => t.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const user = (content: string) => [{ role: "user" as const, content }];

/** Concatenated delta contents per choice index, and reasoning deltas, of streamed chunks. */
function assemble(chunks: any[]) {
  const content = new Map<number, string>();
  const reasoning = new Map<number, string>();
  const finish = new Map<number, string>();
  for (const c of chunks)
    for (const ch of c.choices) {
      if (typeof ch.delta?.content === "string") content.set(ch.index, (content.get(ch.index) ?? "") + ch.delta.content);
      if (typeof ch.delta?.reasoning_content === "string") reasoning.set(ch.index, (reasoning.get(ch.index) ?? "") + ch.delta.reasoning_content);
      if (ch.finish_reason) {
        expect(finish.has(ch.index)).toBe(false);
        finish.set(ch.index, ch.finish_reason);
      }
    }
  return { content, reasoning, finish };
}

describe("offpeak-echo, not streamed", () => {
  test("the exact chat.completion shape with real usage counts", async () => {
    const before = now();
    const res = await client.chat.completions.create({ model: "offpeak-echo", messages: [{ role: "system", content: "be brief" }, ...user("Hello there, world!")] });
    expect(Object.keys(res).sort()).toEqual(["choices", "created", "id", "model", "object", "system_fingerprint", "usage"].sort());
    expect(res.id).toMatch(CHATCMPL_ID);
    expect(res.object).toBe("chat.completion");
    expect(Number.isInteger(res.created)).toBe(true);
    expect(res.created).toBeGreaterThanOrEqual(before);
    expect(res.created).toBeLessThanOrEqual(now());
    expect(res.model).toBe("offpeak-echo");
    expect(res.choices).toEqual([{ index: 0, message: { role: "assistant", content: "Hello there, world!", refusal: null }, logprobs: null, finish_reason: "stop" }]);
    // Tokens are word runs and single punctuation marks: "Hello there , world !" = 5;
    // "be brief" = 2; each message adds 3 tokens of framing.
    expect(res.usage).toEqual({
      prompt_tokens: 2 + 3 + 5 + 3,
      completion_tokens: 5,
      total_tokens: 2 + 3 + 5 + 3 + 5,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
  });

  test("the reply is the last user message; content arrays are read as text", async () => {
    const res = await client.chat.completions.create({
      model: "offpeak-echo",
      messages: [
        { role: "user", content: "first" },
        { role: "assistant", content: "first" },
        { role: "user", content: [{ type: "text", text: "second message" }] },
      ],
    });
    expect(res.choices[0]!.message.content).toBe("second message");
    expect(res.usage!.completion_tokens).toBe(2);
    // Every response carries a request id and a JSON content type.
    const raw = await post("/chat/completions", { model: "offpeak-echo", messages: user("x") });
    expect(raw.status).toBe(200);
    expect(raw.headers.get("x-request-id")).toMatch(REQUEST_ID);
    expect(raw.headers.get("content-type")).toMatch(/^application\/json/);
    // Each answer has its own id.
    expect((await json(raw)).id).not.toBe(res.id);
  });

  test("max_tokens and max_completion_tokens cut the reply: finish_reason length, usage counts the cut", async () => {
    const text = "one two three four five six";
    for (const [field, n] of [
      ["max_tokens", 2],
      ["max_completion_tokens", 4],
    ] as const) {
      const res = await client.chat.completions.create({ model: "offpeak-echo", messages: user(text), [field]: n });
      const expected = text.split(" ").slice(0, n).join(" ");
      expect(res.choices[0]!.message.content).toBe(expected);
      expect(res.choices[0]!.finish_reason).toBe("length");
      expect(res.usage!.completion_tokens).toBe(n);
      expect(res.usage!.prompt_tokens).toBe(6 + 3);
      expect(res.usage!.total_tokens).toBe(6 + 3 + n);
    }
    // A limit the reply fits in is not a cut.
    const fits = await client.chat.completions.create({ model: "offpeak-echo", messages: user(text), max_tokens: 6 });
    expect(fits.choices[0]!.message.content).toBe(text);
    expect(fits.choices[0]!.finish_reason).toBe("stop");
  });

  test("n gives n identical choices with their indexes; usage counts all of them", async () => {
    const res = await client.chat.completions.create({ model: "offpeak-echo", messages: user("a b c"), n: 3 });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    for (const c of res.choices) {
      expect(c.message.content).toBe("a b c");
      expect(c.finish_reason).toBe("stop");
    }
    expect(res.usage!.completion_tokens).toBe(9);
    expect(res.usage!.prompt_tokens).toBe(6);
  });

  test("stop (string or array) ends the reply before the first stop sequence", async () => {
    const one = await client.chat.completions.create({ model: "offpeak-echo", messages: user("alpha beta. gamma delta"), stop: "." });
    expect(one.choices[0]!.message.content).toBe("alpha beta");
    expect(one.choices[0]!.finish_reason).toBe("stop");
    expect(one.usage!.completion_tokens).toBe(2);
    const many = await client.chat.completions.create({ model: "offpeak-echo", messages: user("alpha beta gamma delta"), stop: ["delta", " gamma"] });
    expect(many.choices[0]!.message.content).toBe("alpha beta");
    const none = await client.chat.completions.create({ model: "offpeak-echo", messages: user("alpha beta"), stop: ["zeta"] });
    expect(none.choices[0]!.message.content).toBe("alpha beta");
  });

  test("reasoning_effort: a deterministic reasoning_content, counted in reasoning_tokens", async () => {
    const ask = () => client.chat.completions.create({ model: "offpeak-echo", messages: user("think about this"), reasoning_effort: "low" });
    const a = await ask();
    const b = await ask();
    const msg = a.choices[0]!.message as any;
    expect(Object.keys(msg).sort()).toEqual(["content", "reasoning_content", "refusal", "role"]);
    expect(msg.content).toBe("think about this");
    expect(typeof msg.reasoning_content).toBe("string");
    expect(msg.reasoning_content.length).toBeGreaterThan(0);
    expect((b.choices[0]!.message as any).reasoning_content).toBe(msg.reasoning_content);
    const reasoningTokens = a.usage!.completion_tokens_details!.reasoning_tokens!;
    expect(reasoningTokens).toBeGreaterThan(0);
    // completion tokens = the answer's 3 tokens + the reasoning tokens.
    expect(a.usage!.completion_tokens).toBe(3 + reasoningTokens);
    expect(a.usage!.total_tokens).toBe(a.usage!.prompt_tokens + a.usage!.completion_tokens);
    expect(b.usage).toEqual(a.usage);
    // More effort, more reasoning; no effort, no reasoning.
    const high = await client.chat.completions.create({ model: "offpeak-echo", messages: user("think about this"), reasoning_effort: "high" });
    expect(high.usage!.completion_tokens_details!.reasoning_tokens!).toBeGreaterThan(reasoningTokens);
    expect((high.choices[0]!.message as any).reasoning_content).not.toBe(msg.reasoning_content);
    const plain = await client.chat.completions.create({ model: "offpeak-echo", messages: user("think about this") });
    expect(plain.choices[0]!.message).not.toHaveProperty("reasoning_content");
    expect(plain.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
  });

  test("reasoning counts against max_tokens: a tight limit cuts the answer", async () => {
    const full = await client.chat.completions.create({ model: "offpeak-echo", messages: user("one two three four"), reasoning_effort: "low" });
    const r = full.usage!.completion_tokens_details!.reasoning_tokens!;
    const cut = await client.chat.completions.create({ model: "offpeak-echo", messages: user("one two three four"), reasoning_effort: "low", max_tokens: r + 2 });
    expect(cut.choices[0]!.message.content).toBe("one two");
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(cut.usage!.completion_tokens).toBe(r + 2);
    expect(cut.usage!.completion_tokens_details!.reasoning_tokens).toBe(r);
  });

  test("unknown fields are ignored", async () => {
    const res = await post("/chat/completions", { model: "offpeak-echo", messages: user("ok then"), temperature: 0.2, top_p: 0.9, user: "u1", seed: 3, frobnicate: { a: 1 } });
    expect(res.status).toBe(200);
    expect((await json(res)).choices[0].message.content).toBe("ok then");
  });

  test("the same route under /v1", async () => {
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.admin}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "offpeak-echo", messages: user("via v1") }),
    });
    expect(res.status).toBe(200);
    expect((await json(res)).choices[0].message.content).toBe("via v1");
  });
});

describe("offpeak-echo, streamed", () => {
  test("SDK stream: a role chunk, one content delta per token, a finish chunk; deltas add up to the reply", async () => {
    const stream = await client.chat.completions.create({ model: "offpeak-echo", messages: user("Hello there, world!"), stream: true });
    const chunks: any[] = [];
    for await (const c of stream) chunks.push(c);
    const ids = new Set(chunks.map((c) => c.id));
    expect(ids.size).toBe(1);
    expect([...ids][0]).toMatch(CHATCMPL_ID);
    for (const c of chunks) {
      expect(c.object).toBe("chat.completion.chunk");
      expect(c.model).toBe("offpeak-echo");
      expect(Number.isInteger(c.created)).toBe(true);
      // Without include_usage there is no usage field at all.
      expect(c).not.toHaveProperty("usage");
    }
    expect(chunks[0].choices).toEqual([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
    const middle = chunks.slice(1, -1);
    expect(middle.map((c) => c.choices[0].delta.content)).toEqual(["Hello", " there", ",", " world", "!"]);
    for (const c of middle) expect(c.choices[0].finish_reason).toBeNull();
    expect(chunks[chunks.length - 1].choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]);
  });

  test("stream_options.include_usage: usage:null on every chunk, then a final chunk with empty choices and the usage", async () => {
    const body = { model: "offpeak-echo", messages: user("count these four words"), stream: true as const, stream_options: { include_usage: true } };
    const stream = await client.chat.completions.create(body);
    const chunks: any[] = [];
    for await (const c of stream) chunks.push(c);
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: 4 + 3,
      completion_tokens: 4,
      total_tokens: 11,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
    // Same usage as the non-streamed answer.
    const plain = await client.chat.completions.create({ model: "offpeak-echo", messages: user("count these four words") });
    expect(last.usage).toEqual(plain.usage);
  });

  test("raw SSE over fetch: text/event-stream, `data: {...}` events, ending in `data: [DONE]`", async () => {
    const res = await post("/chat/completions", { model: "offpeak-echo", messages: user("raw stream"), stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    const { chunks, raw } = await readAllSse(res);
    expect(raw.startsWith("data: {")).toBe(true);
    // Every event is one `data:` line followed by a blank line.
    for (const block of raw.split("\n\n").filter((b) => b !== "")) expect(block).toMatch(/^data: [^\n]+$/);
    expect(assemble(chunks).content.get(0)).toBe("raw stream");
    expect(assemble(chunks).finish.get(0)).toBe("stop");
  });

  test("max_tokens, n and stop when streaming agree with the plain answer", async () => {
    const cases = [
      { messages: user("one two three four five"), max_tokens: 3 },
      { messages: user("one two three"), n: 2 },
      { messages: user("alpha beta. gamma"), stop: "." },
    ];
    for (const c of cases) {
      const plain = await client.chat.completions.create({ model: "offpeak-echo", ...c });
      const res = await post("/chat/completions", { model: "offpeak-echo", ...c, stream: true, stream_options: { include_usage: true } });
      expect(res.status).toBe(200);
      const { chunks } = await readAllSse(res);
      const got = assemble(chunks);
      expect(got.content.size).toBe(plain.choices.length);
      for (const ch of plain.choices) {
        expect(got.content.get(ch.index)).toBe(ch.message.content!);
        expect(got.finish.get(ch.index)).toBe(ch.finish_reason);
      }
      expect(chunks[chunks.length - 1].usage).toEqual(plain.usage);
    }
  });

  test("reasoning_effort streamed: reasoning_content deltas come before the first content delta and add up to the plain reasoning", async () => {
    const plain = await client.chat.completions.create({ model: "offpeak-echo", messages: user("think about this"), reasoning_effort: "medium" });
    const stream = await client.chat.completions.create({
      model: "offpeak-echo",
      messages: user("think about this"),
      reasoning_effort: "medium",
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: any[] = [];
    for await (const c of stream) chunks.push(c);
    const firstContent = chunks.findIndex((c) => c.choices[0]?.delta?.content);
    const reasoningAt = chunks.map((c, i) => (typeof c.choices[0]?.delta?.reasoning_content === "string" ? i : -1)).filter((i) => i >= 0);
    expect(reasoningAt.length).toBeGreaterThan(1);
    expect(firstContent).toBeGreaterThan(reasoningAt[reasoningAt.length - 1]!);
    const got = assemble(chunks);
    expect(got.reasoning.get(0)).toBe((plain.choices[0]!.message as any).reasoning_content);
    expect(got.content.get(0)).toBe("think about this");
    const usage = chunks[chunks.length - 1].usage;
    expect(usage).toEqual(plain.usage);
    expect(usage.completion_tokens_details.reasoning_tokens).toBe(reasoningAt.length);
  });
});

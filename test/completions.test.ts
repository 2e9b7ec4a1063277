// docs/CONTRACT.md §13: POST /completions (legacy text completions) with the official
// `openai` SDK — offpeak-echo answers with the prompt's text (max_tokens,
// stop, n, echo, prompt arrays and token ids; plain and streamed), upstream
// models passed through (a fake engine; a scripted one for aborts and
// errors); 400s naming the field; 401/403/404; rate-limit headers.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { REQUEST_ID, configWriter, eventually, expectError, json, jsonResponse, pushStream, readAllSse, sseReader, startScriptedUpstream, within, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { clearOfMinuteEnd } from "./helpers/wait";

const CMPL_ID = /^cmpl-[0-9A-Za-z]{24}$/;

let t: TestServer;
let fake: FakeUpstream;
let up: ScriptedUpstream;
let client: OpenAI;
const cfg = configWriter("offpeak-completions-");

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-model"] });
  up = await startScriptedUpstream({ models: ["up-cmpl"] });
  const config = cfg.write("completions.json", {
    upstreams: [
      { name: "fake", base_url: fake.baseUrl, models: ["fake-model"] },
      { name: "scripted", base_url: up.baseUrl, models: ["up-cmpl"] },
    ],
    models: { "offpeak-echo": { tokens_per_second: 100 } },
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

const post = (body: unknown, init: { key?: string | null; signal?: AbortSignal } = {}) =>
  t.api("/completions", { method: "POST", key: init.key, signal: init.signal, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("offpeak-echo", () => {
  test("the SDK's completions.create: the prompt's text back, with usage", async () => {
    const c = await client.completions.create({ model: "offpeak-echo", prompt: "Say this is a test." });
    expect(c.id).toMatch(CMPL_ID);
    expect(c.object).toBe("text_completion");
    expect(c.model).toBe("offpeak-echo");
    expect(c.choices).toEqual([{ text: "Say this is a test.", index: 0, logprobs: null, finish_reason: "stop" }]);
    expect(c.usage).toEqual({ prompt_tokens: 6, completion_tokens: 6, total_tokens: 12 });
  });

  test("max_tokens, stop, n, echo and prompt arrays", async () => {
    const cut = await client.completions.create({ model: "offpeak-echo", prompt: "one two three four", max_tokens: 2 });
    expect(cut.choices[0]).toMatchObject({ text: "one two", finish_reason: "length" });
    expect(cut.usage!.completion_tokens).toBe(2);
    const stopped = await client.completions.create({ model: "offpeak-echo", prompt: "first line. second line", stop: ["."] });
    expect(stopped.choices[0]).toMatchObject({ text: "first line", finish_reason: "stop" });
    // n choices per prompt, prompt by prompt (index = prompt·n + k), as OpenAI numbers them.
    const many = await client.completions.create({ model: "offpeak-echo", prompt: ["alpha", "beta gamma"], n: 2 });
    expect(many.choices.map((c) => [c.index, c.text])).toEqual([
      [0, "alpha"],
      [1, "alpha"],
      [2, "beta gamma"],
      [3, "beta gamma"],
    ]);
    expect(many.usage).toEqual({ prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 });
    // echo: the prompt, then the completion; max_tokens 0 with echo: the prompt alone.
    const echoed = await client.completions.create({ model: "offpeak-echo", prompt: "ab cd", echo: true });
    expect(echoed.choices[0]!.text).toBe("ab cdab cd");
    const promptOnly = await client.completions.create({ model: "offpeak-echo", prompt: "ab cd", echo: true, max_tokens: 0 });
    expect(promptOnly.choices[0]).toMatchObject({ text: "ab cd", finish_reason: "length" });
    // Token ids stand as words t<id>.
    const ids = await json(await post({ model: "offpeak-echo", prompt: [[1, 2], [3]] }));
    expect(ids.choices.map((c: any) => c.text)).toEqual(["t1 t2", "t3"]);
  });

  test("streamed (SDK): text_completion chunks whose texts add up, then finish_reason, then usage with include_usage", async () => {
    const stream = await client.completions.create({ model: "offpeak-echo", prompt: "stream this text please", stream: true, stream_options: { include_usage: true } });
    const chunks: any[] = [];
    const arrived: number[] = [];
    for await (const c of stream) {
      chunks.push(c);
      arrived.push(performance.now());
    }
    expect(chunks.every((c) => c.object === "text_completion" && CMPL_ID.test(c.id))).toBe(true);
    const texts = chunks.filter((c) => c.choices.length > 0).map((c) => c.choices[0].text);
    expect(texts.join("")).toBe("stream this text please");
    expect(chunks.at(-2).choices[0].finish_reason).toBe("stop");
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 } });
    // Token by token at the model's pace (100 tokens/s).
    expect(arrived[3]! - arrived[0]!).toBeGreaterThan(10);
  });

  test("the wire format: data: chunks ending in one data: [DONE]; with echo the prompt comes first", async () => {
    const res = await post({ model: "offpeak-echo", prompt: "x y", stream: true, echo: true });
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    const { chunks } = await readAllSse(res);
    expect(chunks.map((c) => c.choices[0]?.text)).toEqual(["x y", "x", " y", ""]);
  });
});

describe("bad input and access", () => {
  test("400 naming the field", async () => {
    const cases: [Record<string, unknown>, string, string?][] = [
      [{ model: "offpeak-echo" }, "prompt", "missing_field"],
      [{ model: "offpeak-echo", prompt: 5 }, "prompt"],
      [{ model: "offpeak-echo", prompt: [] }, "prompt"],
      [{ model: "offpeak-echo", prompt: ["a", 1] }, "prompt"],
      [{ model: "offpeak-echo", prompt: [-1] }, "prompt"],
      [{ model: "offpeak-echo", prompt: "x", max_tokens: -1 }, "max_tokens"],
      [{ model: "offpeak-echo", prompt: "x", n: 0 }, "n"],
      [{ model: "offpeak-echo", prompt: "x", stop: 5 }, "stop"],
      [{ model: "offpeak-echo", prompt: "x", echo: "yes" }, "echo"],
      [{ model: "offpeak-echo", prompt: "x", temperature: -1 }, "temperature"],
      [{ model: "offpeak-echo", prompt: "x", stream: 1 }, "stream"],
      [{ model: "offpeak-echo", prompt: "x", stream_options: { include_usage: true } }, "stream_options"],
      [{ prompt: "x" }, "model", "missing_field"],
      // offpeak reads the prompt of every model (its tokens count): checked for upstream models too.
      [{ model: "fake-model", prompt: { text: "x" } }, "prompt"],
    ];
    for (const [body, param, code] of cases) await expectError(await post(body), 400, { param, ...(code ? { code } : {}) });
    expect(fake.stats.requests).toBe(0);
    await expectError(await post({ model: "offpeak-embed", prompt: "x" }), 404, { code: "model_not_found" });
    const err = await client.completions.create({ model: "offpeak-echo", prompt: "x", max_tokens: -5 }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  });

  test("401, 403, 404 under both bases", async () => {
    const batchesOnly = await t.createKey({ name: "batches-only", scopes: ["batches:read", "batches:write"] });
    for (const base of ["/api/v1", "/v1"]) {
      const send = (key: string | null) =>
        fetch(`${t.url}${base}/completions`, { method: "POST", headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) }, body: JSON.stringify({ model: "offpeak-echo", prompt: "x" }) });
      await expectError(await send(null), 401);
      await expectError(await send(batchesOnly), 403, { code: "insufficient_scope" });
      expect((await send(t.admin)).status).toBe(200);
      await expectError(await fetch(`${t.url}${base}/completions/cmpl-x`, { method: "POST", headers: { authorization: `Bearer ${t.admin}` } }), 404);
    }
  });

  test("x-ratelimit-* headers on answers of a limited key", async () => {
    await clearOfMinuteEnd();
    const key = (await json(await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "rl", scopes: ["inference"], rate_limits: { rpm: 1 } }) }))).key;
    const ok = await post({ model: "offpeak-echo", prompt: "x" }, { key });
    expect(ok.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    await expectError(await post({ model: "offpeak-echo", prompt: "x" }, { key }), 429);
  });
});

describe("upstream models: passed through", () => {
  test("the SDK against an engine, plain and streamed", async () => {
    const c = await client.completions.create({ model: "fake-model", prompt: "engine prompt" });
    expect(c.id).toMatch(/^cmpl-fake/);
    expect(c.choices[0]!.text).toBe("engine prompt");
    const stream = await client.completions.create({ model: "fake-model", prompt: "engine stream text", stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe("engine stream text");
    expect(fake.counts.get("engine stream text")).toBe(1);
  });

  test("the body reaches the engine untouched; a client abort cancels its request; errors before the first byte are JSON", async () => {
    up.handler = (r) => jsonResponse({ id: "cmpl-up", object: "text_completion", choices: [{ text: "ok", index: 0, finish_reason: "stop", logprobs: null }], got: r.body });
    const body = { model: "up-cmpl", prompt: ["a", "b"], suffix: "z", best_of: 2, logit_bias: { "50256": -100 } };
    expect((await json(await post(body))).got).toEqual(body);
    expect(up.requests[0]!.path).toBe("/completions");

    let s: ReturnType<typeof pushStream> | undefined;
    up.handler = (r) => {
      s = pushStream(r);
      s.data({ id: "cmpl-up", object: "text_completion", choices: [{ text: "par", index: 0, finish_reason: null, logprobs: null }] });
      return s.response;
    };
    const abort = new AbortController();
    const res = await post({ model: "up-cmpl", prompt: "long", stream: true }, { signal: abort.signal });
    const reader = sseReader(res);
    expect(JSON.parse((await within(reader.nextData(), 5000, "the first chunk"))!).choices[0].text).toBe("par");
    abort.abort();
    await within(s!.cancelled, 5000, "the engine to see its request cancelled");
    await eventually(async () => (await json(await t.api("/status"))).models.find((m: any) => m.id === "up-cmpl").in_flight === 0, "the slot to be released");

    up.handler = () => jsonResponse({ error: { message: "bad prompt", type: "invalid_request_error", param: "prompt", code: null } }, 400);
    await expectError(await post({ model: "up-cmpl", prompt: "x" }), 400, { param: "prompt" });
    up.handler = () => new Response("oops", { status: 503 });
    await expectError(await post({ model: "up-cmpl", prompt: "x", stream: true }), 502);
  });
});

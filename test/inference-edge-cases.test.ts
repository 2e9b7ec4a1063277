// Edge cases of inference, each against a real offpeak server and, where an upstream is involved, a
// scripted OpenAI-compatible engine on 127.0.0.1:
// - an upstream's 2xx embeddings answer that is not JSON → 502 upstream_error;
// - offpeak-embed never returns an all-zero vector (L2-normalised, docs/CONTRACT.md §6);
// - offpeak-echo: max_tokens cutting the reasoning → finish_reason "length";
// - §10 details: unknown reasoning_effort, stream_options without stream,
//   temperature null on a chat-session stream, the param named for a bad
//   max_tokens/max_completion_tokens, a missing model → missing_field.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { configWriter, expectError, json, jsonResponse, pushStream, readAllSse, startScriptedUpstream, upstreamChunk, type ScriptedUpstream, type UpstreamHandler } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let up: ScriptedUpstream;
let t: TestServer;
const cfg = configWriter("offpeak-edge-cases-");

beforeAll(async () => {
  // A proxy error page in front of the engine: 200 text/html for embeddings.
  const handler: UpstreamHandler = (r) => {
    if (r.path === "/embeddings") return new Response("<html>proxy error page</html>", { headers: { "content-type": "text/html" } });
    if (r.body?.stream === true) {
      const s = pushStream(r);
      s.data(upstreamChunk(r.body.model, { role: "assistant", content: "ok" }, "stop"));
      s.send("data: [DONE]\n\n");
      s.close();
      return s.response;
    }
    return jsonResponse({ id: "chatcmpl-up", object: "chat.completion", created: 1, model: r.body.model, choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });
  };
  up = await startScriptedUpstream({ models: ["up-chat", "html-embed"], handler });
  const config = cfg.write("config.json", { upstreams: [{ name: "up", base_url: up.baseUrl, models: ["up-chat", "html-embed"] }] });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
  cfg.cleanup();
});
beforeEach(() => up.reset());

const post = (path: string, body: unknown) => t.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const msgs = [{ role: "user", content: "hello there" }];

test("item 3: an upstream's 200 text/html answer to /embeddings → 502 upstream_error (JSON error body)", async () => {
  const res = await post("/embeddings", { model: "html-embed", input: "x" });
  await expectError(res, 502, { code: "upstream_error", type: "server_error", param: null, message: /invalid JSON/ });
  expect(up.requests.length).toBe(1);
  // The SDK sees an APIError with the status, not a parse failure of an HTML page.
  const err = await t.sdk().embeddings.create({ model: "html-embed", input: "x", encoding_format: "float" }).catch((e) => e);
  expect(err?.status).toBe(502);
});

test("item 4: offpeak-embed never returns an all-zero vector; inputs whose features cancel still get norm 1", async () => {
  // Their signed feature hashes cancel exactly at dimensions 1 (the old answer was [0] for both).
  const res = await post("/embeddings", { model: "offpeak-embed", input: ["a c yo", "a d ok"], dimensions: 1 });
  expect(res.status).toBe(200);
  const body = await json(res);
  for (const d of body.data) expect(Math.abs(d.embedding[0])).toBe(1);
  // Deterministic: the same input gives the same vector again.
  const again = await json(await post("/embeddings", { model: "offpeak-embed", input: ["a c yo", "a d ok"], dimensions: 1 }));
  expect(again.data.map((d: any) => d.embedding)).toEqual(body.data.map((d: any) => d.embedding));
  // Any small dimension: every vector has norm 1.
  for (const dimensions of [1, 2, 3]) {
    const input = ["a b c", "yo ok hi", "a c yo", "x zz the", "cat a d", "ok ok ok"];
    const r = await json(await post("/embeddings", { model: "offpeak-embed", input, dimensions }));
    for (const d of r.data) expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 5);
  }
});

test("item 5: max_completion_tokens cutting the reasoning of an empty reply → finish_reason length, plain and streamed", async () => {
  const body = { model: "offpeak-echo", messages: [{ role: "user", content: "" }], reasoning_effort: "high", max_completion_tokens: 2 };
  const plain = await json(await post("/chat/completions", body));
  expect(plain.choices[0].message.content).toBe("");
  expect(plain.choices[0].message.reasoning_content).toBe("The user");
  expect(plain.usage.completion_tokens_details.reasoning_tokens).toBe(2);
  expect(plain.choices[0].finish_reason).toBe("length");

  const { chunks } = await readAllSse(await post("/chat/completions", { ...body, stream: true }));
  const finishes = chunks.flatMap((c) => c.choices.map((ch: any) => ch.finish_reason)).filter((f) => f !== null);
  expect(finishes).toEqual(["length"]);
  expect(chunks.map((c) => c.choices[0]?.delta?.reasoning_content ?? "").join("")).toBe("The user");

  // Reasoning that fits exactly with an empty reply is not cut: stop.
  const full = await json(await post("/chat/completions", { ...body, reasoning_effort: "minimal", max_completion_tokens: 100 }));
  expect(full.choices[0].finish_reason).toBe("stop");
});

describe("item 9: validation details (docs/CONTRACT.md §10)", () => {
  test("reasoning_effort: an unknown value → 400 on offpeak-echo; known values and null are fine; upstreams get it untouched", async () => {
    for (const reasoning_effort of ["bogus", "HIGH", "", "toString"]) {
      await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, reasoning_effort }), 400, { code: "invalid_value", param: "reasoning_effort" });
    }
    for (const reasoning_effort of ["none", "minimal", "low", "medium", "high", null]) {
      expect((await post("/chat/completions", { model: "offpeak-echo", messages: msgs, reasoning_effort })).status).toBe(200);
    }
    // Passed through to an upstream without offpeak's own check.
    expect((await post("/chat/completions", { model: "up-chat", messages: msgs, reasoning_effort: "bogus" })).status).toBe(200);
    expect(up.requests[0]!.body.reasoning_effort).toBe("bogus");
  });

  test("stream_options without stream:true → 400 param stream_options, on every model; null is fine", async () => {
    for (const model of ["offpeak-echo", "up-chat"]) {
      for (const stream of [undefined, false, null]) {
        await expectError(await post("/chat/completions", { model, messages: msgs, stream, stream_options: { include_usage: true } }), 400, {
          code: "invalid_value",
          param: "stream_options",
        });
      }
      expect((await post("/chat/completions", { model, messages: msgs, stream_options: null })).status).toBe(200);
      expect((await post("/chat/completions", { model, messages: msgs, stream: true, stream_options: { include_usage: true } })).status).toBe(200);
    }
    // Only the two accepted requests reached the upstream (the refused ones never left offpeak).
    expect(up.requests.length).toBe(2);
  });

  test('POST /chats/{id}/stream with "temperature": null means not given', async () => {
    for (const model of ["offpeak-echo", "up-chat"]) {
      const chat = await json(await post("/chats", { model }));
      const res = await post(`/chats/${chat.id}/stream`, { content: "hi there", temperature: null, max_tokens: null });
      if (res.status !== 200) throw new Error(`${model}: ${res.status} ${await res.text()}`);
      await readAllSse(res);
    }
    // Not sent on as null either.
    expect(up.requests.length).toBe(1);
    expect("temperature" in up.requests[0]!.body).toBe(false);
    // A real value is still checked.
    const chat = await json(await post("/chats", { model: "offpeak-echo" }));
    await expectError(await post(`/chats/${chat.id}/stream`, { content: "x", temperature: 3 }), 400, { param: "temperature" });
  });

  test("a bad max_tokens / max_completion_tokens is reported under its own name", async () => {
    const e1 = await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, max_completion_tokens: null, max_tokens: 0 }), 400, {
      code: "invalid_value",
      param: "max_tokens",
    });
    expect(e1.message).toMatch(/^max_tokens /);
    const e2 = await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, max_completion_tokens: "abc" }), 400, {
      code: "invalid_value",
      param: "max_completion_tokens",
    });
    expect(e2.message).toMatch(/^max_completion_tokens /);
    await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, max_completion_tokens: 5, max_tokens: "abc" }), 400, { param: "max_tokens" });
  });

  test("a missing (or null) model → 400 missing_field param model, on /chat/completions and /embeddings", async () => {
    for (const model of [undefined, null]) {
      await expectError(await post("/chat/completions", { model, messages: msgs }), 400, { code: "missing_field", param: "model" });
      await expectError(await post("/embeddings", { model, input: "x" }), 400, { code: "missing_field", param: "model" });
    }
    // A model of the wrong type is still invalid_value.
    await expectError(await post("/chat/completions", { model: 5, messages: msgs }), 400, { code: "invalid_value", param: "model" });
    await expectError(await post("/embeddings", { model: 5, input: "x" }), 400, { code: "invalid_value", param: "model" });
    expect(up.requests.length).toBe(0);
  });
});

// docs/CONTRACT.md §3 / §10 on the inference routes: malformed JSON and wrong content
// types → 400 (never the framework's 422); missing model/messages/input →
// 400 naming the param; an unknown model → 404 model_not_found; bad types →
// 400 naming the param; unknown fields ignored. A refused request reaches no
// model (the upstream sees nothing) and costs no quota.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { expectError, json, startScriptedUpstream, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let up: ScriptedUpstream;
/** A key with rpm 1: if any refused request counted, the good one at the end would get 429. */
let key: string;

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["up-chat"] });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_BATCH_WORKERS: "1" } });
  const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "rpm1", scopes: ["inference"], rate_limits: { rpm: 1 } }) });
  key = (await json(res)).key;
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
});
beforeEach(() => up.reset());

const raw = (path: string, body: string | FormData, type?: string) =>
  t.api(path, { method: "POST", key, headers: type ? { "content-type": type } : {}, body });
const post = (path: string, body: unknown) => raw(path, JSON.stringify(body), "application/json");
const msgs = [{ role: "user", content: "hello" }];

describe("malformed bodies", () => {
  const MALFORMED = ["{", '{"model": "offpeak-echo"', "nul", '{"model": "offpeak-echo"} trailing', "{'model': 'offpeak-echo'}", ""];

  for (const path of ["/chat/completions", "/embeddings"]) {
    test(`${path}: malformed JSON → 400 invalid_request_error`, async () => {
      for (const body of MALFORMED) {
        const res = await raw(path, body, "application/json");
        expect({ body, status: res.status }).toEqual({ body, status: 400 });
        await expectError(res, 400, { type: "invalid_request_error" });
      }
    });

    test(`${path}: JSON that is not an object → 400`, async () => {
      for (const body of ["[]", '"text"', "5", "null", "true"]) {
        const res = await raw(path, body, "application/json");
        expect({ body, status: res.status }).toEqual({ body, status: 400 });
        await expectError(res, 400);
      }
    });

    test(`${path}: wrong content types → 400`, async () => {
      const good = JSON.stringify(path === "/embeddings" ? { model: "offpeak-embed", input: "x" } : { model: "offpeak-echo", messages: msgs });
      for (const type of ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"]) {
        const res = await raw(path, good, type);
        expect({ type, status: res.status }).toEqual({ type, status: 400 });
        await expectError(res, 400);
      }
      // Well-formed forms whose fields would make a valid request are refused too.
      const fields: Record<string, string> = path === "/embeddings" ? { model: "offpeak-embed", input: "x" } : { model: "offpeak-echo", messages: "hi" };
      const form = new FormData();
      for (const [k, v] of Object.entries(fields)) form.append(k, v);
      await expectError(await raw(path, form), 400);
      await expectError(await raw(path, new URLSearchParams(fields).toString(), "application/x-www-form-urlencoded"), 400);
      // No content type at all.
      await expectError(await t.api(path, { method: "POST", key, body: new Blob([good]) }), 400);
    });
  }
});

describe("POST /chat/completions fields", () => {
  test("missing or bad model → 400 naming model; unknown model → 404 model_not_found", async () => {
    await expectError(await post("/chat/completions", { messages: msgs }), 400, { param: "model" });
    for (const model of [5, null, "", ["offpeak-echo"], { id: "offpeak-echo" }]) {
      await expectError(await post("/chat/completions", { model, messages: msgs }), 400, { param: "model" });
    }
    await expectError(await post("/chat/completions", { model: "gpt-nope", messages: msgs }), 404, { code: "model_not_found", param: "model", type: "not_found_error" });
    // An embeddings model does not chat.
    const res = await post("/chat/completions", { model: "offpeak-embed", messages: msgs });
    expect([400, 404]).toContain(res.status);
    expect((await json(res)).error.param).toBe("model");
  });

  test("missing or bad messages → 400 naming messages", async () => {
    for (const model of ["offpeak-echo", "up-chat"]) {
      await expectError(await post("/chat/completions", { model }), 400, { param: "messages" });
      for (const messages of ["hello", [], {}, null, 5]) {
        await expectError(await post("/chat/completions", { model, messages }), 400, { param: "messages" });
      }
    }
    // The built-in model checks each message: a role, and content that is text, parts or null.
    for (const messages of [[5], [null], [{ content: "no role" }], [{ role: 7, content: "x" }], [{ role: "user", content: 5 }], [{ role: "user", content: { text: "x" } }]]) {
      const res = await post("/chat/completions", { model: "offpeak-echo", messages });
      expect({ messages, status: res.status }).toEqual({ messages, status: 400 });
      await expectError(res, 400, { param: "messages" });
    }
    // None of it reached the upstream.
    expect(up.requests.length).toBe(0);
  });

  test("bad n, max_tokens, max_completion_tokens → 400 naming the param", async () => {
    for (const n of [0, -1, 129, 1.5, "2", true]) await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, n }), 400, { param: "n" });
    for (const max_tokens of [0, -1, 1.5, "3", false]) await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, max_tokens }), 400, { param: "max_tokens" });
    for (const max_completion_tokens of [0, "3"]) {
      await expectError(await post("/chat/completions", { model: "offpeak-echo", messages: msgs, max_completion_tokens }), 400, { param: "max_completion_tokens" });
    }
  });

  test("bad stream / stream_options → 400 naming the param, on every model (offpeak reads them)", async () => {
    for (const model of ["offpeak-echo", "up-chat"]) {
      for (const stream of ["yes", 1, "true", {}]) await expectError(await post("/chat/completions", { model, messages: msgs, stream }), 400, { param: "stream" });
      for (const stream_options of ["usage", 5, [true]]) {
        await expectError(await post("/chat/completions", { model, messages: msgs, stream: true, stream_options }), 400, { param: "stream_options" });
      }
      await expectError(await post("/chat/completions", { model, messages: msgs, stream: true, stream_options: { include_usage: "yes" } }), 400, {
        param: "stream_options.include_usage",
      });
    }
    expect(up.requests.length).toBe(0);
  });

  test("bad sampling fields on the built-in model → 400 naming the param", async () => {
    const cases: [string, unknown[]][] = [
      ["temperature", ["hot", -0.5, 2.5, [1]]],
      ["top_p", ["all", -0.1, 1.5]],
      ["stop", [5, [1, 2], { s: "x" }, [true]]],
      ["reasoning_effort", [5, true, ["low"]]],
    ];
    for (const [param, values] of cases)
      for (const v of values) {
        const res = await post("/chat/completions", { model: "offpeak-echo", messages: msgs, [param]: v });
        expect({ param, v, status: res.status }).toEqual({ param, v, status: 400 });
        await expectError(res, 400, { param });
      }
  });

  test("null means not given; unknown fields are ignored", async () => {
    const res = await t.api("/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "offpeak-echo", messages: msgs, n: null, max_tokens: null, stop: null, stream: null, stream_options: null, temperature: null, reasoning_effort: null, unknown_field: [1, 2, 3] }),
    });
    expect(res.status).toBe(200);
    expect((await json(res)).choices).toEqual([{ index: 0, message: { role: "assistant", content: "hello", refusal: null }, logprobs: null, finish_reason: "stop" }]);
  });
});

describe("JSON content types that are accepted", () => {
  test("application/json with parameters, in any case, on every JSON route", async () => {
    const chat = await json(await t.api("/chats", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-echo" }) }));
    const cases: [string, unknown][] = [
      ["/chat/completions", { model: "offpeak-echo", messages: msgs }],
      ["/embeddings", { model: "offpeak-embed", input: "x" }],
      ["/chats", { model: "offpeak-echo" }],
      [`/chats/${chat.id}/stream`, { content: "hi" }],
    ];
    for (const [path, body] of cases)
      for (const type of ["application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"]) {
        const res = await t.api(path, { method: "POST", headers: { "content-type": type }, body: JSON.stringify(body) });
        expect({ path, type, status: res.status }).toEqual({ path, type, status: 200 });
        await res.arrayBuffer();
      }
  });
});

describe("POST /embeddings fields", () => {
  test("missing or bad model → 400 naming model; unknown model → 404; a chat model does not embed", async () => {
    await expectError(await post("/embeddings", { input: "x" }), 400, { param: "model" });
    for (const model of [5, null, ""]) await expectError(await post("/embeddings", { model, input: "x" }), 400, { param: "model" });
    await expectError(await post("/embeddings", { model: "text-embedding-nope", input: "x" }), 404, { code: "model_not_found", param: "model" });
    const res = await post("/embeddings", { model: "offpeak-echo", input: "x" });
    expect([400, 404]).toContain(res.status);
    expect((await json(res)).error.param).toBe("model");
  });

  test("missing input → 400 naming input, also for an upstream model (which sees nothing)", async () => {
    await expectError(await post("/embeddings", { model: "offpeak-embed" }), 400, { param: "input" });
    await expectError(await post("/embeddings", { model: "up-chat" }), 400, { param: "input" });
    await expectError(await post("/embeddings", { model: "up-chat", input: 42 }), 400, { param: "input" });
    expect(up.requests.length).toBe(0);
  });
});

describe("refused requests cost nothing", () => {
  test("after all the refusals above, the rpm-1 key still has its one request", async () => {
    const res = await post("/chat/completions", { model: "offpeak-echo", messages: msgs });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const again = await post("/chat/completions", { model: "offpeak-echo", messages: msgs });
    expect(again.status).toBe(429);
  });
});

// docs/CONTRACT.md §6: OpenAI-compatible upstreams behind offpeak, against a scripted
// engine on loopback (a real Bun.serve HTTP server) — models discovered from
// the upstream's GET /models (OFFPEAK_UPSTREAM_URL/KEY) or named in the
// config file with a model_map and api_key_env; non-streamed and streamed
// proxying; the upstream sees the mapped model name and its own key;
// streams pass through as they arrive (causality, not timing) and byte for
// byte; reasoning fields untouched; a client disconnect aborts the upstream
// request; upstream 4xx pass through, 5xx → 502, timeout → 504,
// unreachable → 502.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import {
  REQUEST_ID,
  configWriter,
  deferred,
  eventually,
  expectError,
  json,
  jsonResponse,
  pushStream,
  readAllSse,
  sseReader,
  startScriptedUpstream,
  upstreamChunk,
  upstreamCompletion,
  sleep,
  within,
  type ScriptedUpstream,
} from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { freePort } from "./helpers/env";

const UPSTREAM_KEY = "sk-upstream-secret-from-env-1234";
const MAPPED_KEY = "sk-mapped-upstream-key-5678";

let up: ScriptedUpstream;
let t: TestServer;
let client: OpenAI;
const cfg = configWriter("offpeak-inf-up-");

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["up-chat", "up-embed", "org/up-model"] });
  const dead = freePort();
  const config = cfg.write("upstreams.json", {
    upstreams: [
      { name: "mapped", base_url: up.baseUrl, api_key_env: "MAPPED_UPSTREAM_KEY", models: ["alias-chat"], model_map: { "alias-chat": "real/model-name" } },
      { name: "hasty", base_url: up.baseUrl, models: ["hasty-chat"], timeout_s: 0.5 },
      // Discovery would fail against a closed port, so the model is named here.
      { name: "dead", base_url: `http://127.0.0.1:${dead}/v1`, models: ["dead-chat"] },
    ],
  });
  t = await startTestServer({
    argv: ["--config", config],
    env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_UPSTREAM_KEY: UPSTREAM_KEY, MAPPED_UPSTREAM_KEY: MAPPED_KEY, OFFPEAK_BATCH_WORKERS: "1" },
  });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
  cfg.cleanup();
});
beforeEach(() => up.reset());

const post = (path: string, body: unknown, init: RequestInit = {}) =>
  t.api(path, { method: "POST", ...init, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const user = (content: string) => [{ role: "user" as const, content }];

async function inFlight(model: string): Promise<number> {
  const s = await json(await t.api("/status"));
  return s.models.find((m: any) => m.id === model)?.in_flight;
}

describe("models from upstreams", () => {
  test("GET /models lists the discovered models and the configured ones; discovery sent the upstream key", async () => {
    const body = await json(await t.api("/models"));
    const byId = new Map<string, any>(body.data.map((m: any) => [m.id, m]));
    expect([...byId.keys()].sort()).toEqual(["alias-chat", "dead-chat", "hasty-chat", "offpeak-echo", "offpeak-embed", "org/up-model", "up-chat", "up-embed"]);
    // The shortcut's upstream has no configured name: owned_by is whatever offpeak calls it, the same for all its models.
    expect(byId.get("up-chat")).toEqual({ id: "up-chat", object: "model", created: expect.any(Number), owned_by: expect.any(String) });
    expect(byId.get("up-chat").owned_by.length).toBeGreaterThan(0);
    expect(byId.get("up-embed").owned_by).toBe(byId.get("up-chat").owned_by);
    expect(byId.get("alias-chat").owned_by).toBe("mapped");
    expect(byId.get("dead-chat").owned_by).toBe("dead");
    // The upstream itself is not listed under its own model names (real/model-name is internal).
    expect(byId.has("real/model-name")).toBe(false);
  });

  test("the upstream's discovery request carried its key (env upstream) — checked on a fresh server", async () => {
    const fresh = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_UPSTREAM_KEY: UPSTREAM_KEY, OFFPEAK_BATCH_WORKERS: "1" } });
    try {
      expect(up.modelListRequests.length).toBeGreaterThanOrEqual(1);
      expect(up.modelListRequests.map((h) => h.get("authorization"))).toContain(`Bearer ${UPSTREAM_KEY}`);
      const ids = (await fresh.sdk().models.list()).data.map((m) => m.id).sort();
      expect(ids).toEqual(["offpeak-echo", "offpeak-embed", "org/up-model", "up-chat", "up-embed"]);
    } finally {
      await fresh.stop();
    }
  });

  test("a model id with a slash: GET /models/{id} and the SDK's retrieve (which percent-encodes it)", async () => {
    const res = await t.api("/models/org/up-model");
    expect(res.status).toBe(200);
    const listed = (await json(await t.api("/models"))).data.find((m: any) => m.id === "org/up-model");
    expect(await json(res)).toEqual(listed);
    const viaSdk = await client.models.retrieve("org/up-model");
    expect(viaSdk.id).toBe("org/up-model");
    await expectError(await t.api("/models/org/nope"), 404, { code: "model_not_found" });
  });
});

describe("proxying, not streamed", () => {
  test("chat: the client gets the upstream's answer unchanged; the upstream gets the request, its model name and key", async () => {
    let sent: unknown;
    up.handler = (r) => {
      sent = upstreamCompletion(r.body, { usage: { prompt_tokens: 11, completion_tokens: 2, total_tokens: 13 } });
      return jsonResponse(sent);
    };
    const res = await client.chat.completions.create({
      model: "up-chat",
      messages: [{ role: "system", content: "sys" }, ...user("hi upstream")],
      temperature: 0.3,
      max_tokens: 50,
      // Fields offpeak does not know pass through to the engine.
      ...({ top_k: 7, chat_template_kwargs: { enable_thinking: false } } as object),
    });
    expect(res).toEqual(sent as any);
    expect(up.requests.length).toBe(1);
    const r = up.requests[0]!;
    expect(r.method).toBe("POST");
    expect(r.path).toBe("/chat/completions");
    expect(r.headers.get("authorization")).toBe(`Bearer ${UPSTREAM_KEY}`);
    expect(r.headers.get("content-type")).toMatch(/^application\/json/);
    // Our own key never reaches the upstream.
    expect(JSON.stringify([...r.headers])).not.toContain(t.admin);
    expect(r.body).toEqual({
      model: "up-chat",
      messages: [
        { role: "system", content: "sys" },
        { role: "user", content: "hi upstream" },
      ],
      temperature: 0.3,
      max_tokens: 50,
      top_k: 7,
      chat_template_kwargs: { enable_thinking: false },
    });
  });

  test("the body reaches the engine byte for byte (numbers as written, key order, unknown fields) unless its model name is mapped", async () => {
    // Spacing, 1.0, 1e2 and the key order would all change if the body were parsed and written again.
    const raw = `{"messages": [{"role":"user","content":"as sent \u00e9"}], "model":"up-chat", "temperature":1.0, "top_p":1e0, "max_tokens": 50}`;
    const res = await t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: raw });
    expect(res.status).toBe(200);
    expect(up.requests[0]!.text).toBe(raw);
    const mapped = await t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: raw.replace('"up-chat"', '"alias-chat"') });
    expect(mapped.status).toBe(200);
    expect(JSON.parse(up.requests[1]!.text)).toEqual({ ...JSON.parse(raw), model: "real/model-name" });
  });

  test("model_map: the upstream receives its own model name and the key from api_key_env", async () => {
    const res = await client.chat.completions.create({ model: "alias-chat", messages: user("mapped please") });
    expect(res.choices[0]!.message.content).toBe("mapped please");
    expect(up.requests.length).toBe(1);
    expect(up.requests[0]!.body.model).toBe("real/model-name");
    expect(up.requests[0]!.headers.get("authorization")).toBe(`Bearer ${MAPPED_KEY}`);
  });

  test("embeddings through the upstream", async () => {
    let sent: any;
    up.handler = (r) => {
      sent = { object: "list", data: [{ object: "embedding", index: 0, embedding: [0.6, 0.8] }], model: r.body.model, usage: { prompt_tokens: 2, total_tokens: 2 } };
      return jsonResponse(sent);
    };
    const res = await client.embeddings.create({ model: "up-embed", input: "embed me", encoding_format: "float" });
    expect(res).toEqual(sent);
    expect(up.requests[0]!.path).toBe("/embeddings");
    expect(up.requests[0]!.body).toEqual({ model: "up-embed", input: "embed me", encoding_format: "float" });
    expect(up.requests[0]!.headers.get("authorization")).toBe(`Bearer ${UPSTREAM_KEY}`);
  });

  test("reasoning fields (reasoning_content, reasoning, reasoning token counts) pass through untouched", async () => {
    const answer = upstreamCompletion(
      { model: "up-chat", messages: user("why?") },
      {
        message: { reasoning_content: "Because the sky scatters blue light.", reasoning: "Rayleigh scattering, step by step." },
        usage: { prompt_tokens: 5, completion_tokens: 40, total_tokens: 45, completion_tokens_details: { reasoning_tokens: 37, accepted_prediction_tokens: 0 } },
      },
    );
    const text = JSON.stringify(answer);
    up.handler = () => new Response(text, { headers: { "content-type": "application/json" } });
    const res = await post("/chat/completions", { model: "up-chat", messages: user("why?"), reasoning_effort: "high" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    expect(await res.text()).toBe(text);
    expect(up.requests[0]!.body.reasoning_effort).toBe("high");
    const viaSdk = await client.chat.completions.create({ model: "up-chat", messages: user("why?") });
    expect((viaSdk.choices[0]!.message as any).reasoning_content).toBe("Because the sky scatters blue light.");
    expect((viaSdk.choices[0]!.message as any).reasoning).toBe("Rayleigh scattering, step by step.");
    expect(viaSdk.usage!.completion_tokens_details!.reasoning_tokens).toBe(37);
  });
});

describe("proxying, streamed", () => {
  test("chunks pass through as they arrive: the client has the first chunk before the upstream sends the rest", async () => {
    const firstRead = deferred();
    const sentRaw: string[] = [];
    let upstreamDone = false;
    up.handler = (r) => {
      const s = pushStream(r);
      const data = (obj: unknown) => {
        const text = `data: ${typeof obj === "string" ? obj : JSON.stringify(obj)}\n\n`;
        sentRaw.push(text);
        s.send(text);
      };
      data(upstreamChunk(r.body.model, { role: "assistant", content: "" }));
      (async () => {
        // The rest is sent only after the test has read the first chunk on
        // the client side: a server that buffered would never get there.
        await firstRead.promise;
        for (const word of ["streamed ", "through ", "offpeak"]) {
          await Bun.sleep(20);
          data(upstreamChunk(r.body.model, { content: word }));
        }
        data(upstreamChunk(r.body.model, {}, "stop"));
        data("[DONE]");
        upstreamDone = true;
        s.close();
      })();
      return s.response;
    };
    const res = await post("/chat/completions", { model: "up-chat", messages: user("stream it"), stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    const reader = sseReader(res);
    const first = await within(reader.nextData(), 5000, "the first chunk (is the upstream stream buffered?)");
    expect(upstreamDone).toBe(false);
    expect(JSON.parse(first!).choices[0].delta).toEqual({ role: "assistant", content: "" });
    firstRead.resolve();
    const rest = await within(reader.rest(), 5000, "the rest of the stream");
    expect(rest[rest.length - 1]).toBe("[DONE]");
    expect(rest.slice(0, -1).map((d) => JSON.parse(d).choices[0].delta.content ?? "").join("")).toBe("streamed through offpeak");
    // Byte for byte what the upstream sent.
    expect(reader.raw).toBe(sentRaw.join(""));
    expect(up.requests[0]!.body.stream).toBe(true);
    expect(up.requests[0]!.body.model).toBe("up-chat");
    await eventually(async () => (await inFlight("up-chat")) === 0, "the slot to be released");
  });

  test("the SDK streams through an upstream; stream_options reach it", async () => {
    up.handler = (r) => {
      const s = pushStream(r);
      s.data(upstreamChunk(r.body.model, { role: "assistant", content: "" }, null, { usage: null }));
      s.data(upstreamChunk(r.body.model, { content: "sdk " }, null, { usage: null }));
      s.data(upstreamChunk(r.body.model, { content: "ok" }, "stop", { usage: null }));
      s.data({ id: "chatcmpl-upstream-s", object: "chat.completion.chunk", created: 1700000000, model: r.body.model, choices: [], usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 } });
      s.data("[DONE]");
      s.close();
      return s.response;
    };
    const stream = await client.chat.completions.create({ model: "up-chat", messages: user("x"), stream: true, stream_options: { include_usage: true } });
    const chunks: any[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("sdk ok");
    expect(chunks[chunks.length - 1].usage).toEqual({ prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 });
    expect(up.requests[0]!.body.stream_options).toEqual({ include_usage: true });
  });

  test("streamed reasoning deltas (reasoning_content and reasoning) pass through untouched", async () => {
    const events = [
      upstreamChunk("up-chat", { role: "assistant", content: null, reasoning_content: "" }),
      upstreamChunk("up-chat", { reasoning_content: "Let me think", reasoning: "Let me think" }),
      upstreamChunk("up-chat", { reasoning_content: " carefully.", reasoning: " carefully." }),
      upstreamChunk("up-chat", { content: "Answer." }),
      { ...upstreamChunk("up-chat", {}, "stop"), usage: { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9, completion_tokens_details: { reasoning_tokens: 4 } } },
    ];
    const sent = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + "data: [DONE]\n\n";
    up.handler = (r) => {
      const s = pushStream(r);
      s.send(sent);
      s.close();
      return s.response;
    };
    const res = await post("/chat/completions", { model: "up-chat", messages: user("reason"), stream: true });
    const { chunks, raw } = await readAllSse(res);
    expect(raw).toBe(sent);
    expect(chunks).toEqual(events);
  });

  test("a client that disconnects mid-stream aborts the upstream request", async () => {
    let stream: ReturnType<typeof pushStream> | undefined;
    up.handler = (r) => {
      stream = pushStream(r);
      stream.data(upstreamChunk(r.body.model, { role: "assistant", content: "" }));
      stream.data(upstreamChunk(r.body.model, { content: "never " }));
      // …and then nothing more: the upstream is still generating.
      return stream.response;
    };
    const abort = new AbortController();
    const res = await t.api("/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "up-chat", messages: user("long one"), stream: true }),
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    expect(JSON.parse((await within(reader.nextData(), 5000, "first chunk"))!).choices[0].delta.role).toBe("assistant");
    expect(await inFlight("up-chat")).toBe(1);
    abort.abort();
    await within(stream!.cancelled, 5000, "the upstream to see its request aborted");
    // The slot is released, and the upstream stream is really closed.
    await eventually(async () => (await inFlight("up-chat")) === 0, "the slot to be released");
    expect(stream!.send("data: late\n\n")).toBe(false);
  });

  test("a client that disconnects while a non-streamed upstream answer is pending aborts the upstream request", async () => {
    const got = deferred<import("./helpers/inference").UpstreamRequest>();
    up.handler = async (r) => {
      got.resolve(r);
      await r.gone; // holds the answer until offpeak goes away
      return jsonResponse(upstreamCompletion(r.body));
    };
    const abort = new AbortController();
    const pending = t
      .api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "up-chat", messages: user("hold") }), signal: abort.signal })
      .catch((e) => e);
    const r = await within(got.promise, 5000, "the request to reach the upstream");
    abort.abort();
    expect(((await pending) as Error).name).toBe("AbortError");
    await within(r.gone, 5000, "the upstream to see its request aborted");
    await eventually(async () => (await inFlight("up-chat")) === 0, "the slot to be released");
  });
});

describe("upstream failures", () => {
  test("an upstream 4xx passes through with its status and body (plain and streamed requests)", async () => {
    const bodies: [number, unknown, Record<string, string>][] = [
      [400, { error: { message: "temperature must be at most 2", type: "invalid_request_error", param: "temperature", code: "invalid_value" } }, {}],
      [404, { error: { message: "The model 'up-chat' does not exist", type: "invalid_request_error", param: "model", code: "model_not_found" } }, {}],
      [429, { error: { message: "slow down", type: "rate_limit_error", param: null, code: "rate_limit_exceeded" } }, { "retry-after": "7" }],
    ];
    for (const [status, body, headers] of bodies) {
      for (const stream of [false, true]) {
        up.handler = () => jsonResponse(body, status, headers);
        const res = await post("/chat/completions", { model: "up-chat", messages: user("bad"), stream });
        expect({ status: res.status, stream }).toEqual({ status, stream });
        expect(res.headers.get("content-type")).toMatch(/^application\/json/);
        expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
        if (headers["retry-after"]) expect(res.headers.get("retry-after")).toBe(headers["retry-after"]);
        expect(await json(res)).toEqual(body);
      }
    }
    // The SDK sees it as the matching error class with the upstream's message.
    up.handler = () => jsonResponse(bodies[0]![1], 400);
    let err: any;
    try {
      await client.chat.completions.create({ model: "up-chat", messages: user("bad") });
    } catch (e) {
      err = e;
    }
    expect(err?.status).toBe(400);
    expect(err?.error?.param).toBe("temperature");
    // Embeddings too.
    up.handler = () => jsonResponse(bodies[0]![1], 400);
    const emb = await post("/embeddings", { model: "up-embed", input: "x" });
    expect(emb.status).toBe(400);
    expect(await json(emb)).toEqual(bodies[0]![1]);
  });

  test("an upstream 4xx whose body is not an OpenAI error still gets the OpenAI error shape", async () => {
    up.handler = () => new Response("Bad Request: nope", { status: 400, headers: { "content-type": "text/plain" } });
    const e = await expectError(await post("/chat/completions", { model: "up-chat", messages: user("x") }), 400);
    expect(e.message).toContain("nope");
  });

  test("an upstream 5xx becomes 502 with an OpenAI error body (plain, streamed, embeddings)", async () => {
    const answers = [
      () => jsonResponse({ error: { message: "CUDA out of memory", type: "server_error", param: null, code: null } }, 500),
      () => new Response("<html>503 Service Unavailable</html>", { status: 503, headers: { "content-type": "text/html" } }),
    ];
    for (const answer of answers) {
      up.handler = answer;
      for (const stream of [false, true]) {
        await expectError(await post("/chat/completions", { model: "up-chat", messages: user("x"), stream }), 502, { type: "server_error", code: "upstream_error" });
      }
      await expectError(await post("/embeddings", { model: "up-embed", input: "x" }), 502, { type: "server_error", code: "upstream_error" });
    }
    // The engine's internals (HTML pages) do not leak into the message.
    up.handler = answers[1]!;
    const e = await expectError(await post("/chat/completions", { model: "up-chat", messages: user("x") }), 502);
    expect(e.message).not.toContain("<html>");
    expect(await inFlight("up-chat")).toBe(0);
  });

  test("an upstream 200 with a body that is not JSON → 502", async () => {
    up.handler = () => new Response("this is not json", { headers: { "content-type": "application/json" } });
    await expectError(await post("/chat/completions", { model: "up-chat", messages: user("x") }), 502, { code: "upstream_error" });
  });

  test("an upstream that does not answer within timeout_s → 504 (plain and streamed), and the upstream request is aborted", async () => {
    for (const stream of [false, true]) {
      up.reset();
      up.handler = async (r) => {
        await r.gone;
        return jsonResponse(upstreamCompletion(r.body));
      };
      const res = await post("/chat/completions", { model: "hasty-chat", messages: user("too slow"), stream });
      await expectError(res, 504, { type: "server_error", code: "upstream_timeout" });
      await within(up.requests[0]!.gone, 5000, "the timed-out upstream request to be aborted");
    }
    expect(await inFlight("hasty-chat")).toBe(0);
  });

  test("an upstream that sends headers and then stalls its body past timeout_s → 504", async () => {
    up.handler = (r) => {
      const s = pushStream(r, { headers: { "content-type": "application/json" } });
      s.send('{"id":"chatcmpl-x","object":"chat.completion",');
      return s.response;
    };
    await expectError(await post("/chat/completions", { model: "hasty-chat", messages: user("stall") }), 504, { code: "upstream_timeout" });
    // Embeddings read the whole body the same way.
    await expectError(await post("/embeddings", { model: "hasty-chat", input: "stall" }), 504, { code: "upstream_timeout" });
    expect(await inFlight("hasty-chat")).toBe(0);
  });

  test("events split across upstream chunks at any byte (LF and CRLF framing) reach the client whole and in order", async () => {
    for (const eol of ["\n", "\r\n"]) {
      const events = ["Hel", "lo", " wor", "ld"].map((content) => `data: ${JSON.stringify(upstreamChunk("up-chat", { content }))}${eol}${eol}`);
      const text = events.join("") + `data: [DONE]${eol}${eol}`;
      up.handler = (r) => {
        const s = pushStream(r);
        (async () => {
          // Pieces of 1..7 bytes, with pauses: every boundary lands somewhere inside an event.
          for (let i = 0, k = 0; i < text.length; k++) {
            const n = 1 + (k % 7);
            s.send(text.slice(i, i + n));
            i += n;
            if (k % 5 === 0) await sleep(1);
          }
          s.close();
        })();
        return s.response;
      };
      const stream = await client.chat.completions.create({ model: "up-chat", messages: user("split"), stream: true });
      const parts: string[] = [];
      for await (const chunk of stream) parts.push(chunk.choices[0]?.delta?.content ?? "");
      expect(parts).toEqual(["Hel", "lo", " wor", "ld"]);
    }
  });

  test("a streamed answer that stalls mid-stream past timeout_s: an upstream_timeout error event ends it (the SDK raises it), no connection reset", async () => {
    up.handler = (r) => {
      const s = pushStream(r);
      s.data(upstreamChunk("hasty-chat", { role: "assistant", content: "half" }));
      // Half an event, then silence past the model's idle timeout.
      s.send('data: {"id":"chatcmpl-x","obj');
      return s.response;
    };
    const res = await post("/chat/completions", { model: "hasty-chat", messages: user("stall"), stream: true });
    expect(res.status).toBe(200);
    const raw = await within(res.text(), 10_000, "the stalled stream to end");
    const events = raw.split("\n\n").filter((e) => e.startsWith("data: "));
    const last = JSON.parse(events[events.length - 1]!.slice(6));
    expect(last).toEqual({ error: { message: expect.stringContaining("did not answer"), type: "server_error", param: null, code: "upstream_timeout" } });
    // Through the official SDK: the event is raised as an error, after the first chunk.
    const seen: string[] = [];
    let err: any;
    try {
      const stream = await client.chat.completions.create({ model: "hasty-chat", messages: user("stall"), stream: true });
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta?.content ?? "");
    } catch (e) {
      err = e;
    }
    expect(seen).toEqual(["half"]);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String(err.message)).toContain("did not answer");
    expect(await inFlight("hasty-chat")).toBe(0);
  });

  test("an unreachable upstream is down (its check at start failed): 503 upstream_unavailable with retry-after, at once (plain, streamed, SDK)", async () => {
    for (const stream of [false, true]) {
      const res = await post("/chat/completions", { model: "dead-chat", messages: user("anyone?"), stream });
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      await expectError(res, 503, { type: "server_error", code: "upstream_unavailable" });
    }
    let err: any;
    try {
      await client.chat.completions.create({ model: "dead-chat", messages: user("anyone?") });
    } catch (e) {
      err = e;
    }
    expect(err?.status).toBe(503);
    expect(await inFlight("dead-chat")).toBe(0);
  });
});

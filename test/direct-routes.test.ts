// The inference routes are served two ways (src/http/direct.ts): an exact
// POST is dispatched directly, everything else through Elysia. Both must
// answer the same: every question below is asked at the exact path (direct)
// and with a trailing slash (Elysia routes it to the same handler), and the
// answers are compared whole — status, the headers clients read, the body
// with only its fresh ids and timestamps blanked. Then the dispatch itself:
// which requests it takes and which it leaves to Elysia.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { directInference } from "../src/http/direct";
import { chatRoute } from "../src/chatCompletions/routes";
import type { AppContext } from "../src/context";
import { ApiError } from "../src/errors";
import { jsonResponse, startScriptedUpstream, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let up: ScriptedUpstream;
let rpmKey: string;
let filesKey: string;

beforeAll(async () => {
  // An engine that answers by what the prompt asks, the same every time: a proxied answer can be compared.
  up = await startScriptedUpstream({
    models: ["up-chat"],
    handler: (r) => {
      const ask = JSON.stringify(r.body);
      if (ask.includes("refuse")) return jsonResponse({ error: { message: "no, thanks", type: "invalid_request_error", param: "messages", code: null } }, 400);
      if (ask.includes("fail")) return jsonResponse({ error: { message: "engine broke", type: "server_error", param: null, code: null } }, 500);
      return jsonResponse({ id: "up-1", object: "chat.completion", created: 1, model: "up-chat", choices: [{ index: 0, message: { role: "assistant", content: ask }, finish_reason: "stop" }] });
    },
  });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl } });
  filesKey = await t.createKey({ scopes: ["files:read"] });
  const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "limited", scopes: ["inference"], rate_limits: { rpm: 1000, tpm: 1000000 } }) });
  rpmKey = ((await res.json()) as { key: string }).key;
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
});

interface Question {
  name: string;
  key?: string | null;
  authorization?: string;
  type?: string;
  body?: string;
}

const GOOD: Record<string, unknown> = {
  "/chat/completions": { model: "offpeak-echo", messages: [{ role: "user", content: "hello there" }], max_tokens: 3, extra_field: { kept: true } },
  "/embeddings": { model: "offpeak-embed", input: ["one", "two"] },
  "/responses": { model: "offpeak-echo", input: "hello there", max_output_tokens: 4 },
  "/completions": { model: "offpeak-echo", prompt: "hello there", max_tokens: 2 },
};

function questions(path: string): Question[] {
  const good = JSON.stringify(GOOD[path]);
  const withModel = (model: unknown) => JSON.stringify({ ...(GOOD[path] as object), model });
  return [
    { name: "a good request", body: good },
    { name: "a good request, rate-limited key", key: "rpm", body: good },
    { name: "no key", key: null, body: good },
    { name: "an unknown key", key: "sk-op-not-a-key-000000000000000000000000", body: good },
    { name: "a malformed Authorization header", authorization: "Basic abc", body: good },
    { name: "a key without the inference scope", key: "files", body: good },
    { name: "no content type", type: "", body: good },
    { name: "a form", type: "application/x-www-form-urlencoded", body: "model=offpeak-echo" },
    { name: "JSON with a charset, upper case", type: "Application/JSON; charset=utf-8", body: good },
    { name: "malformed JSON", body: "{" },
    { name: "an empty body", body: "" },
    { name: "a JSON array", body: "[]" },
    { name: "no model", body: JSON.stringify({ ...(GOOD[path] as object), model: undefined }) },
    { name: "model null", body: withModel(null) },
    { name: "model a number (the schema)", body: withModel(5) },
    { name: "an unknown model", body: withModel("no-such-model") },
    { name: "a model that does not serve this kind", body: withModel(path === "/embeddings" ? "offpeak-echo" : "offpeak-embed") },
    ...(path === "/chat/completions"
      ? [
          { name: "messages not an array (the schema)", body: JSON.stringify({ model: "offpeak-echo", messages: "hi" }) },
          { name: "an upstream model", body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "hi" }], temperature: 0.5 }) },
          { name: "an upstream 4xx, verbatim", body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "refuse" }] }) },
          { name: "an upstream 5xx, as 502", body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "fail" }] }) },
          { name: "no messages", body: JSON.stringify({ model: "offpeak-echo" }) },
          { name: "messages null", body: JSON.stringify({ model: "offpeak-echo", messages: null }) },
          { name: "messages empty", body: JSON.stringify({ model: "offpeak-echo", messages: [] }) },
          { name: "stream not a boolean", body: JSON.stringify({ ...(GOOD[path] as object), stream: "yes" }) },
        ]
      : []),
    ...(path === "/responses" ? [{ name: "no input", body: JSON.stringify({ model: "offpeak-echo" }) }] : []),
    ...(path === "/completions" ? [{ name: "no prompt", body: JSON.stringify({ model: "offpeak-echo" }) }] : []),
    ...(path === "/embeddings" ? [
          { name: "no input", body: JSON.stringify({ model: "offpeak-embed" }) },
          { name: "input a number", body: JSON.stringify({ model: "offpeak-embed", input: 42 }) },
        ] : []),
  ];
}

async function ask(url: string, q: Question) {
  const headers: Record<string, string> = {};
  const key = q.key === undefined ? t.admin : q.key === "rpm" ? rpmKey : q.key === "files" ? filesKey : q.key;
  if (q.authorization) headers.authorization = q.authorization;
  else if (key !== null) headers.authorization = `Bearer ${key}`;
  if (q.type !== "") headers["content-type"] = q.type ?? "application/json";
  const res = await fetch(url, { method: "POST", headers, body: q.body });
  const text = await res.text();
  return {
    status: res.status,
    contentType: res.headers.get("content-type"),
    requestId: /^req_[0-9A-Za-z]{24}$/.test(res.headers.get("x-request-id") ?? ""),
    wwwAuthenticate: res.headers.get("www-authenticate"),
    retryAfter: res.headers.get("retry-after"),
    // Their values move with each request counted: which are sent is what both must agree on.
    rateLimitHeaders: [...res.headers.keys()].filter((k) => k.startsWith("x-ratelimit-")).sort(),
    body: text.replace(/\b(chatcmpl-|resp_|cmpl-|msg_|rs_|req_)[0-9A-Za-z]{24}\b/g, "$1…").replace(/"(created|created_at|completed_at)":\d+/g, '"$1":0'),
  };
}

describe("direct and Elysia dispatch answer the same", () => {
  for (const path of Object.keys(GOOD)) {
    for (const base of ["/api/v1", "/v1"]) {
      test(`${base}${path}`, async () => {
        for (const q of questions(path)) {
          const direct = await ask(`${t.url}${base}${path}`, q);
          const viaElysia = await ask(`${t.url}${base}${path}/`, q);
          expect({ q: q.name, ...direct }).toEqual({ q: q.name, ...viaElysia });
          expect({ q: q.name, requestId: direct.requestId }).toEqual({ q: q.name, requestId: true });
        }
      });
    }
  }

  test("the answers are the right ones (not merely equal)", async () => {
    const [good, noKey, scope, form, schema] = await Promise.all([
      ask(`${t.base}/chat/completions`, questions("/chat/completions")[0]!),
      ask(`${t.base}/chat/completions`, { name: "", key: null, body: "{}" }),
      ask(`${t.base}/chat/completions`, { name: "", key: "files", body: "{}" }),
      ask(`${t.base}/chat/completions`, { name: "", type: "application/x-www-form-urlencoded", body: "model=x" }),
      ask(`${t.base}/chat/completions`, { name: "", body: JSON.stringify({ model: 5, messages: [] }) }),
    ]);
    expect(good.status).toBe(200);
    expect(JSON.parse(good.body).object).toBe("chat.completion");
    expect(noKey.status).toBe(401);
    expect(noKey.wwwAuthenticate).toContain("Bearer");
    expect(scope.status).toBe(403);
    expect(form.status).toBe(400);
    expect(schema.status).toBe(400);
    expect(JSON.parse(schema.body).error.param).toBe("model");
  });

  test("the SDK works through the direct dispatch", async () => {
    const answer = await t.sdk().chat.completions.create({ model: "offpeak-echo", messages: [{ role: "user", content: "ping" }] });
    expect(answer.choices[0]!.message.content).toContain("ping");
  });
});

describe("what the direct dispatch takes", () => {
  const seen: string[] = [];
  const dispatch = directInference(
    { config: { maxJsonBytes: 1 << 20 } } as AppContext,
    [chatRoute],
    ["/api/v1", "/v1"],
    {
      open: () => {
        throw new ApiError("invalid_api_key", "stop here");
      },
      answerError: (_code, error) => new Response((error as Error).message, { status: 299 }),
    },
    (request) => {
      seen.push(`${request.method} ${new URL(request.url).pathname}`);
      return new Response("fallback");
    },
  );

  test("exact POSTs under either base, with or without a query", async () => {
    for (const url of ["http://h/v1/chat/completions", "http://h/api/v1/chat/completions", "http://h/v1/chat/completions?x=1"]) {
      const res = await dispatch(new Request(url, { method: "POST", body: "{}" }));
      expect({ url, status: res.status, text: await res.text() }).toEqual({ url, status: 299, text: "stop here" });
    }
    expect(seen).toEqual([]);
  });

  test("everything else goes to Elysia", async () => {
    const others: [string, string][] = [
      ["GET", "http://h/v1/chat/completions"],
      ["HEAD", "http://h/api/v1/chat/completions"],
      ["POST", "http://h/v1/chat/completions/"],
      ["POST", "http://h/v1/embeddings"], // not a route given to this dispatch
      ["POST", "http://h/v2/chat/completions"],
      ["POST", "http://h/chat/completions"],
    ];
    for (const [method, url] of others) await dispatch(new Request(url, { method, body: method === "POST" ? "{}" : undefined }));
    expect(seen).toEqual(others.map(([m, u]) => `${m} ${new URL(u).pathname}`));
  });
});

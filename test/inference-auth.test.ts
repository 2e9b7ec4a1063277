// docs/CONTRACT.md §2, §3, §10 on every inference route (chat completions, embeddings,
// responses, completions, models, chats, status), under both bases: 401 (with WWW-Authenticate:
// Bearer) without a valid key — missing, malformed, unknown, revoked, or
// only in the query string; 403 without the `inference` scope (GET /status
// needs none); another project's chat answers 404 exactly like an unknown
// id; junk path ids answer 404 JSON. Rejected requests change nothing.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ADMIN_KEY, startTestServer, type TestServer } from "./helpers/server";
import { REQUEST_ID, json } from "./helpers/inference";

let t: TestServer;
/** A chat of project "default" with one exchange, used as the :chat target. */
let chatId: string;
let otherChat: string;
let otherKey: string;
let revokedKey: string;

const BASES = ["/api/v1", "/v1"];

interface Route {
  method: "GET" | "POST" | "DELETE";
  /** :chat is replaced by a live chat id. */
  path: string;
  /** null: any valid key. */
  scope: "inference" | null;
  body?: unknown;
}

const ROUTES: Route[] = [
  { method: "POST", path: "/chat/completions", scope: "inference", body: { model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] } },
  { method: "POST", path: "/chat/completions", scope: "inference", body: { model: "offpeak-echo", messages: [{ role: "user", content: "hi" }], stream: true } },
  { method: "POST", path: "/embeddings", scope: "inference", body: { model: "offpeak-embed", input: "hi" } },
  { method: "POST", path: "/responses", scope: "inference", body: { model: "offpeak-echo", input: "hi" } },
  { method: "POST", path: "/responses", scope: "inference", body: { model: "offpeak-echo", input: "hi", stream: true } },
  { method: "POST", path: "/completions", scope: "inference", body: { model: "offpeak-echo", prompt: "hi" } },
  { method: "GET", path: "/models", scope: "inference" },
  { method: "GET", path: "/models/offpeak-echo", scope: "inference" },
  { method: "POST", path: "/chats", scope: "inference", body: { model: "offpeak-echo", metadata: { made: "by-auth-test" } } },
  { method: "GET", path: "/chats", scope: "inference" },
  { method: "GET", path: "/chats/:chat", scope: "inference" },
  { method: "DELETE", path: "/chats/:chat", scope: "inference" },
  { method: "POST", path: "/chats/:chat/stream", scope: "inference", body: { content: "sneaky" } },
  { method: "GET", path: "/status", scope: null },
];

const label = (r: Route, base: string) => `${r.method} ${base}${r.path}${(r.body as any)?.stream ? " (stream)" : ""}`;

function send(r: Route, base: string, headers: Record<string, string>, query = "", id = chatId): Promise<Response> {
  const h: Record<string, string> = { ...headers };
  if (r.body !== undefined) h["content-type"] = "application/json";
  return fetch(`${t.url}${base}${r.path.replace(":chat", id)}${query}`, { method: r.method, headers: h, body: r.body === undefined ? undefined : JSON.stringify(r.body) });
}

async function problemWith401(res: Response): Promise<string | null> {
  const text = await res.text();
  if (res.status !== 401) return `status ${res.status}: ${text.slice(0, 200)}`;
  const www = res.headers.get("www-authenticate");
  if (!www || !/^Bearer\b/.test(www)) return `WWW-Authenticate: ${www}`;
  if (!res.headers.get("content-type")?.startsWith("application/json")) return `content-type ${res.headers.get("content-type")}`;
  if (!REQUEST_ID.test(res.headers.get("x-request-id") ?? "")) return "no x-request-id";
  const body = JSON.parse(text);
  if (JSON.stringify(Object.keys(body)) !== '["error"]') return `body keys ${Object.keys(body)}`;
  const e = body.error;
  if (JSON.stringify(Object.keys(e).sort()) !== '["code","message","param","type"]') return `error keys ${Object.keys(e)}`;
  if (e.type !== "authentication_error" || e.code !== "invalid_api_key" || typeof e.message !== "string" || e.param !== null) return `error ${JSON.stringify(e)}`;
  return null;
}

async function expectAll401(headers: Record<string, string>, query = "") {
  const problems: string[] = [];
  for (const base of BASES)
    for (const r of ROUTES) {
      const p = await problemWith401(await send(r, base, headers, query));
      if (p) problems.push(`${label(r, base)}${query}: ${p}`);
    }
  expect(problems).toEqual([]);
}

const snapshot = async () => {
  const db = t.server.ctx.db;
  const { chats, chatMessages } = db.t;
  return {
    chats: await db.select({ id: chats.id, project: chats.project, model: chats.model, system: chats.system, metadata: chats.metadata }).from(chats).orderBy(chats.seq),
    messages: await db.select({ id: chatMessages.id, chatId: chatMessages.chatId, role: chatMessages.role, content: chatMessages.content }).from(chatMessages).orderBy(chatMessages.seq),
  };
};
let before: Awaited<ReturnType<typeof snapshot>>;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  const make = async (key: string) => {
    const res = await t.api("/chats", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-echo" }) });
    const id = (await json(res)).id as string;
    const turn = await t.api(`/chats/${id}/stream`, { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "original" }) });
    expect(turn.status).toBe(200);
    await turn.text();
    return id;
  };
  chatId = await make(ADMIN_KEY);
  otherKey = await t.createKey({ name: "other-project", project: "elsewhere", scopes: ["inference"] });
  otherChat = await make(otherKey);
  const k = await json(await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "to-revoke", scopes: ["admin"] }) }));
  revokedKey = k.key;
  expect((await t.api("/models", { key: revokedKey })).status).toBe(200);
  expect((await t.api(`/keys/${k.id}`, { method: "DELETE" })).status).toBe(200);
  before = await snapshot();
});
afterAll(async () => {
  await t?.stop();
});

describe("401 on every inference route", () => {
  test("missing Authorization header", async () => {
    await expectAll401({});
    expect(await snapshot()).toEqual(before);
  });

  test("malformed Authorization headers", async () => {
    for (const v of [`Basic ${btoa("u:" + ADMIN_KEY)}`, "Bearer", "Bearer ", `Token ${ADMIN_KEY}`, ADMIN_KEY, `Bearer ${ADMIN_KEY} extra`, `Bearer:${ADMIN_KEY}`]) {
      await expectAll401({ authorization: v });
    }
    expect(await snapshot()).toEqual(before);
  });

  test("unknown keys (random, near misses)", async () => {
    for (const key of ["sk-op-" + "Q".repeat(40), ADMIN_KEY.slice(0, -1), ADMIN_KEY + "0", otherKey.toUpperCase(), "x".repeat(3000)]) {
      await expectAll401({ authorization: `Bearer ${key}` });
    }
    expect(await snapshot()).toEqual(before);
  });

  test("a revoked key", async () => {
    await expectAll401({ authorization: `Bearer ${revokedKey}` });
    expect(await snapshot()).toEqual(before);
  });

  test("a valid key only in the query string", async () => {
    for (const param of ["access_token", "api_key", "key"]) await expectAll401({}, `?${param}=${encodeURIComponent(ADMIN_KEY)}`);
    expect(await snapshot()).toEqual(before);
  });
});

describe("403 without the inference scope", () => {
  test("keys without `inference` get 403 on every route but /status", async () => {
    for (const scopes of [["files:read", "files:write", "batches:read", "batches:write"], ["files:read"]]) {
      const key = await t.createKey({ name: "no-inference", scopes });
      const got: Record<string, number> = {};
      const want: Record<string, number> = {};
      for (const base of BASES)
        for (const r of ROUTES) {
          const res = await send(r, base, { authorization: `Bearer ${key}` });
          got[label(r, base)] = res.status;
          want[label(r, base)] = r.scope === null ? 200 : 403;
          if (res.status === 403) {
            expect(res.headers.get("www-authenticate")).toBeNull();
            expect(res.headers.get("content-type")).toMatch(/^application\/json/);
            expect(await json(res)).toEqual({ error: { message: expect.stringContaining("inference"), type: "permission_error", param: null, code: "insufficient_scope" } });
          } else await res.arrayBuffer();
        }
      expect(got).toEqual(want);
    }
    expect(await snapshot()).toEqual(before);
  });

  test("an inference-only key and an admin key may use every route", async () => {
    const key = await t.createKey({ name: "inference-only", scopes: ["inference"] });
    for (const k of [key, ADMIN_KEY]) {
      // A scratch chat of its own, so DELETE does not touch the shared one.
      const scratch = await json(await t.api("/chats", { method: "POST", key: k, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-echo" }) }));
      // DELETE last: the other chat routes need the chat.
      for (const r of [...ROUTES.filter((x) => x.method !== "DELETE"), ...ROUTES.filter((x) => x.method === "DELETE")]) {
        const res = await send(r, "/api/v1", { authorization: `Bearer ${k}` }, "", scratch.id);
        expect({ route: label(r, ""), status: res.status }).toEqual({ route: label(r, ""), status: 200 });
        await res.arrayBuffer();
      }
    }
    // Key management stays admin-only.
    expect((await t.api("/keys", { key })).status).toBe(403);
  });
});

describe("404s", () => {
  test("another project's chat answers 404 exactly like an unknown id, on every chat route and base", async () => {
    const unknown = "chat_" + "0".repeat(24);
    const snap = snapshot();
    for (const base of BASES)
      for (const r of ROUTES.filter((x) => x.path.includes(":chat"))) {
        const norm = async (res: Response, id: string) => {
          expect({ route: label(r, base), status: res.status }).toEqual({ route: label(r, base), status: 404 });
          expect(res.headers.get("content-type")).toMatch(/^application\/json/);
          return JSON.stringify(await json(res)).split(id).join("<ID>");
        };
        const foreign = await norm(await send(r, base, { authorization: `Bearer ${ADMIN_KEY}` }, "", otherChat), otherChat);
        const missing = await norm(await send(r, base, { authorization: `Bearer ${ADMIN_KEY}` }, "", unknown), unknown);
        expect(foreign).toBe(missing);
        expect(JSON.parse(foreign).error).toMatchObject({ type: "not_found_error", code: "not_found" });
      }
    expect(snapshot()).toEqual(snap);
    // The owner still sees it, unchanged.
    const mine = await json(await t.api(`/chats/${otherChat}`, { key: otherKey }));
    expect(mine.messages.map((m: any) => m.content)).toEqual(["original", "original"]);
  });

  test("junk path ids (.., %2F, NUL, bad percent-encoding, 10 kB) answer 404 JSON, never 5xx", async () => {
    const junk = [
      "..",
      "%2E%2E",
      "..%2F..%2Fetc%2Fpasswd",
      "%2F",
      "chat_%2F",
      "a%00b",
      "%00",
      "%FF",
      "%E0%A4%A",
      "chat_" + "!".repeat(24),
      "chat_" + "A".repeat(23),
      "chat_" + "A".repeat(25),
      chatId.toLowerCase() === chatId ? chatId.toUpperCase() : chatId.toLowerCase(),
      "%F0%9F%9A%80",
      "x".repeat(10_000),
    ];
    const snap = snapshot();
    const problems: string[] = [];
    for (const id of junk) {
      const targets: [string, string, unknown][] = [
        ["GET", `/chats/${id}`, undefined],
        ["DELETE", `/chats/${id}`, undefined],
        ["POST", `/chats/${id}/stream`, { content: "x" }],
        ["GET", `/models/${id}`, undefined],
      ];
      for (const [method, path, body] of targets) {
        const res = await t.api(path, { method, headers: body ? { "content-type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
        const text = await res.text();
        const what = `${method} ${path.slice(0, 60)}`;
        if (res.status !== 404) {
          problems.push(`${what}: ${res.status} ${text.slice(0, 120)}`);
          continue;
        }
        if (!res.headers.get("content-type")?.startsWith("application/json")) problems.push(`${what}: content-type ${res.headers.get("content-type")}`);
        const e = JSON.parse(text).error;
        if (e?.type !== "not_found_error" || typeof e.message !== "string") problems.push(`${what}: ${text.slice(0, 120)}`);
        // A 10 kB id is not echoed back whole.
        if (text.length > 1000) problems.push(`${what}: ${text.length}-byte error body`);
      }
    }
    expect(problems).toEqual([]);
    expect(snapshot()).toEqual(snap);
  });
});

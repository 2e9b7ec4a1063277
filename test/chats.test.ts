// docs/CONTRACT.md §6 chat sessions: POST /chats, GET /chats (cursor pagination),
// GET /chats/{id} with messages, DELETE /chats/{id}, POST /chats/{id}/stream
// (SSE chat.completion.chunk events ending in [DONE]; the user message and
// the reply are stored; the whole history goes to the model on every turn;
// a client that disconnects stops generation and the partial reply is
// kept), on the built-in echo model (with a simulated speed) and on an
// upstream; project isolation; bad input stores nothing.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import {
  CHAT_ID,
  CHATCMPL_ID,
  MSG_ID,
  REQUEST_ID,
  configWriter,
  eventually,
  expectError,
  json,
  pushStream,
  readAllSse,
  sseReader,
  startScriptedUpstream,
  upstreamChunk,
  within,
  type ScriptedUpstream,
} from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

/** offpeak-echo streams 200 tokens per second here: short replies are quick, long ones take seconds. */
const TOKENS_PER_SECOND = 200;

let t: TestServer;
let up: ScriptedUpstream;
let otherKey: string;
const cfg = configWriter("offpeak-chats-");

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["up-chat"] });
  const config = cfg.write("chats.json", { models: { "offpeak-echo": { tokens_per_second: TOKENS_PER_SECOND } } });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_BATCH_WORKERS: "1" } });
  otherKey = await t.createKey({ name: "other", project: "other-team", scopes: ["inference"] });
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
  cfg.cleanup();
});
beforeEach(() => up.reset());

const now = () => Math.floor(Date.now() / 1000);
const send = (method: string, path: string, body?: unknown, key?: string, signal?: AbortSignal) =>
  t.api(path, { method, key, signal, headers: body === undefined ? {} : { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

async function createChat(body: Record<string, unknown> = { model: "offpeak-echo" }, key?: string) {
  const res = await send("POST", "/chats", body, key);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`POST /chats: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** Sends one turn and reads the whole SSE answer; returns the reply text and the chunks. */
async function turn(id: string, content: string, extra: Record<string, unknown> = {}, key?: string) {
  const res = await send("POST", `/chats/${id}/stream`, { content, ...extra }, key);
  if (res.status !== 200) throw new Error(`stream: ${res.status} ${await res.text()}`);
  expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
  const { chunks, raw } = await readAllSse(res);
  for (const c of chunks) expect(c.object).toBe("chat.completion.chunk");
  return { reply: chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""), chunks, raw };
}

const getChat = async (id: string, key?: string) => json(await send("GET", `/chats/${id}`, undefined, key));
/** Rows in a table (all, or a chat's messages). */
const rowsIn = async (table: "chats" | "chatMessages") => {
  const db = t.server.ctx.db;
  return (await db.select({ n: db.sql.count() }).from(db.t[table]))[0]!.n;
};
const messagesOf = async (chatId: string) => {
  const db = t.server.ctx.db;
  const m = db.t.chatMessages;
  return (await db.select({ n: db.sql.count() }).from(m).where(eq(m.chatId, chatId)))[0]!.n;
};
const inFlight = async (model: string) => (await json(await t.api("/status"))).models.find((m: any) => m.id === model)?.in_flight;

describe("chat records", () => {
  test("POST /chats: the exact record, messages empty; GET /chats/{id} returns the same", async () => {
    const before = now();
    const chat = await createChat({ model: "offpeak-echo", system: "You are terse.", metadata: { topic: "tests", n: "1" } });
    expect(Object.keys(chat).sort()).toEqual(["created_at", "id", "messages", "metadata", "model", "object", "system"]);
    expect(chat.id).toMatch(CHAT_ID);
    expect(chat.object).toBe("chat");
    expect(chat.model).toBe("offpeak-echo");
    expect(chat.system).toBe("You are terse.");
    expect(chat.metadata).toEqual({ topic: "tests", n: "1" });
    expect(chat.messages).toEqual([]);
    expect(Number.isInteger(chat.created_at)).toBe(true);
    expect(chat.created_at).toBeGreaterThanOrEqual(before);
    expect(chat.created_at).toBeLessThanOrEqual(now());
    expect(await getChat(chat.id)).toEqual(chat);
  });

  test("absent system and metadata are null, not omitted", async () => {
    const chat = await createChat({ model: "up-chat" });
    expect(chat.system).toBeNull();
    expect(chat.metadata).toBeNull();
    expect(chat.model).toBe("up-chat");
    expect(await getChat(chat.id)).toEqual(chat);
  });

  test("GET /chats: newest first, cursor pagination with limit/after, first_id/last_id/has_more", async () => {
    const key = await t.createKey({ name: "pager", project: "pager", scopes: ["inference"] });
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await createChat({ model: "offpeak-echo", metadata: { i: String(i) } }, key)).id);
    const newestFirst = [...made].reverse();

    const all = await json(await send("GET", "/chats", undefined, key));
    expect(Object.keys(all).sort()).toEqual(["data", "first_id", "has_more", "last_id", "object"]);
    expect(all.object).toBe("list");
    expect(all.data.map((c: any) => c.id)).toEqual(newestFirst);
    expect(all.has_more).toBe(false);
    expect(all.first_id).toBe(newestFirst[0]);
    expect(all.last_id).toBe(newestFirst[4]);
    for (const item of all.data) {
      const full = await getChat(item.id, key);
      const { messages, ...record } = full;
      const { messages: listed, ...itemRecord } = item;
      expect(itemRecord).toEqual(record);
      if (listed !== undefined) expect(listed).toEqual(messages);
    }

    const pages: string[][] = [];
    let after: string | null = null;
    for (;;) {
      const page: any = await json(await send("GET", `/chats?limit=2${after ? `&after=${after}` : ""}`, undefined, key));
      pages.push(page.data.map((c: any) => c.id));
      expect(page.first_id).toBe(page.data[0]?.id ?? null);
      expect(page.last_id).toBe(page.data[page.data.length - 1]?.id ?? null);
      if (!page.has_more) break;
      after = page.last_id;
    }
    expect(pages).toEqual([newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)]);

    // After the last one: an empty page.
    const empty = await json(await send("GET", `/chats?after=${newestFirst[4]}`, undefined, key));
    expect(empty).toEqual({ object: "list", data: [], first_id: null, last_id: null, has_more: false });
  });

  test("GET /chats: bad limit / after → 400 naming the param; another project's chat as cursor is refused like an unknown one", async () => {
    for (const limit of ["0", "-1", "abc", "101", "1.5"]) await expectError(await t.api(`/chats?limit=${limit}`), 400, { param: "limit" });
    const foreign = await createChat({ model: "offpeak-echo" }, otherKey);
    const unknown = "chat_" + "A".repeat(24);
    const a = await t.api(`/chats?after=${foreign.id}`);
    const b = await t.api(`/chats?after=${unknown}`);
    expect(a.status).toBe(b.status);
    expect(a.status).toBe(400);
    const ea = JSON.stringify(await json(a)).split(foreign.id).join("<ID>");
    const eb = JSON.stringify(await json(b)).split(unknown).join("<ID>");
    expect(ea).toBe(eb);
    expect(JSON.parse(ea).error.param).toBe("after");
  });

  test("DELETE /chats/{id}: the deletion record; then 404 everywhere and gone from the list", async () => {
    const chat = await createChat();
    await turn(chat.id, "something to delete");
    const res = await send("DELETE", `/chats/${chat.id}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(Object.keys(body).sort()).toEqual(["deleted", "id", "object"]);
    expect(body.id).toBe(chat.id);
    expect(body.deleted).toBe(true);
    expect(body.object).toMatch(/^chat(\.deleted)?$/);
    await expectError(await send("GET", `/chats/${chat.id}`), 404, { code: "not_found" });
    await expectError(await send("DELETE", `/chats/${chat.id}`), 404, { code: "not_found" });
    await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: "hello?" }), 404, { code: "not_found" });
    const list = await json(await t.api("/chats?limit=100"));
    expect(list.data.map((c: any) => c.id)).not.toContain(chat.id);
    // Its messages are gone with it.
    expect(await messagesOf(chat.id)).toBe(0);
  });
});

describe("POST /chats/{id}/stream", () => {
  test("streams chat.completion.chunk events ending in [DONE]; stores the user message and the reply", async () => {
    const chat = await createChat();
    const before = now();
    const { reply, chunks } = await turn(chat.id, "Hello, chat session!");
    expect(reply).toBe("Hello, chat session!");
    const ids = new Set(chunks.map((c) => c.id));
    expect(ids.size).toBe(1);
    expect([...ids][0]).toMatch(CHATCMPL_ID);
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("stop");
    for (const c of chunks) expect(c.model).toBe("offpeak-echo");

    const stored = await getChat(chat.id);
    expect(stored.messages.length).toBe(2);
    const [u, a] = stored.messages;
    expect(Object.keys(u).sort()).toEqual(["content", "created_at", "id", "role"]);
    expect(u).toEqual({ id: expect.stringMatching(MSG_ID), role: "user", content: "Hello, chat session!", created_at: expect.any(Number) });
    expect(a).toEqual({ id: expect.stringMatching(MSG_ID), role: "assistant", content: "Hello, chat session!", created_at: expect.any(Number) });
    expect(u.id).not.toBe(a.id);
    expect(u.created_at).toBeGreaterThanOrEqual(before);
    expect(a.created_at).toBeGreaterThanOrEqual(u.created_at);
    expect(a.created_at).toBeLessThanOrEqual(now());
  });

  test("history persists across turns, in order", async () => {
    const chat = await createChat({ model: "offpeak-echo", system: "sys prompt" });
    const texts = ["first turn", "second turn", "third turn"];
    for (const text of texts) expect((await turn(chat.id, text)).reply).toBe(text);
    const stored = await getChat(chat.id);
    expect(stored.messages.map((m: any) => [m.role, m.content])).toEqual(texts.flatMap((x) => [["user", x], ["assistant", x]]));
    // The system prompt is part of the record, not a message.
    expect(stored.system).toBe("sys prompt");
  });

  test("on an upstream, every turn sends the system prompt and the whole history; temperature and max_tokens pass on", async () => {
    up.handler = (r) => {
      const s = pushStream(r);
      const last = r.body.messages[r.body.messages.length - 1].content;
      s.data(upstreamChunk(r.body.model, { role: "assistant", content: "" }));
      s.data(upstreamChunk(r.body.model, { content: "re: " }));
      s.data(upstreamChunk(r.body.model, { content: last }));
      s.data(upstreamChunk(r.body.model, {}, "stop"));
      s.data("[DONE]");
      s.close();
      return s.response;
    };
    const chat = await createChat({ model: "up-chat", system: "Be kind." });
    expect((await turn(chat.id, "one")).reply).toBe("re: one");
    expect((await turn(chat.id, "two", { temperature: 0.5, max_tokens: 20 })).reply).toBe("re: two");
    expect(up.requests.length).toBe(2);
    expect(up.requests[0]!.body.messages).toEqual([
      { role: "system", content: "Be kind." },
      { role: "user", content: "one" },
    ]);
    expect(up.requests[1]!.body).toEqual({
      model: "up-chat",
      stream: true,
      temperature: 0.5,
      max_tokens: 20,
      messages: [
        { role: "system", content: "Be kind." },
        { role: "user", content: "one" },
        { role: "assistant", content: "re: one" },
        { role: "user", content: "two" },
      ],
    });
    expect((await getChat(chat.id)).messages.map((m: any) => m.content)).toEqual(["one", "re: one", "two", "re: two"]);
  });

  test("max_tokens cuts the reply and the cut reply is what is stored", async () => {
    const chat = await createChat();
    const { reply, chunks } = await turn(chat.id, "one two three four five", { max_tokens: 2 });
    expect(reply).toBe("one two");
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("length");
    expect((await getChat(chat.id)).messages.map((m: any) => m.content)).toEqual(["one two three four five", "one two"]);
  });

  test("a client that disconnects mid-stream stops generation; the partial reply is stored", async () => {
    const chat = await createChat();
    // 400 tokens at 200 tokens/s: about 2 s if nobody stopped it.
    const words = Array.from({ length: 400 }, (_, i) => `w${i}`);
    const full = words.join(" ");
    const abort = new AbortController();
    const res = await send("POST", `/chats/${chat.id}/stream`, { content: full }, undefined, abort.signal);
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    let received = "";
    for (let i = 0; i < 6; i++) {
      const d = await within(reader.nextData(), 5000, "a chunk");
      received += JSON.parse(d!).choices[0]?.delta?.content ?? "";
    }
    expect(received.length).toBeGreaterThan(0);
    expect(await inFlight("offpeak-echo")).toBe(1);
    abort.abort();

    const stored = await eventually(async () => {
      const c = await getChat(chat.id);
      return c.messages.length === 2 ? c : null;
    }, "the partial reply to be stored");
    expect(stored.messages[0]).toMatchObject({ role: "user", content: full });
    const partial: string = stored.messages[1].content;
    expect(stored.messages[1].role).toBe("assistant");
    // What the client saw is a prefix of what was stored, which is a strict prefix of the full reply.
    expect(partial.startsWith(received)).toBe(true);
    expect(full.startsWith(partial)).toBe(true);
    expect(partial.length).toBeLessThan(full.length / 2);
    // Generation stopped: the slot is free, and nothing more is stored later.
    await eventually(async () => (await inFlight("offpeak-echo")) === 0, "the model slot to be released");
    await Bun.sleep(100);
    expect((await getChat(chat.id)).messages).toEqual(stored.messages);
    // The chat goes on normally afterwards, with the partial reply in its history.
    expect((await turn(chat.id, "next")).reply).toBe("next");
    expect((await getChat(chat.id)).messages.length).toBe(4);
  });

  test("on an upstream, a disconnect aborts the upstream request and keeps the partial reply", async () => {
    let stream: ReturnType<typeof pushStream> | undefined;
    up.handler = (r) => {
      stream = pushStream(r);
      stream.data(upstreamChunk(r.body.model, { role: "assistant", content: "" }));
      stream.data(upstreamChunk(r.body.model, { content: "partial " }));
      stream.data(upstreamChunk(r.body.model, { content: "answer" }));
      return stream.response; // …and it never finishes
    };
    const chat = await createChat({ model: "up-chat" });
    const abort = new AbortController();
    const res = await send("POST", `/chats/${chat.id}/stream`, { content: "go on" }, undefined, abort.signal);
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    let received = "";
    while (received !== "partial answer") received += JSON.parse((await within(reader.nextData(), 5000, "a chunk"))!).choices[0].delta.content ?? "";
    abort.abort();
    await within(stream!.cancelled, 5000, "the upstream request to be aborted");
    const stored = await eventually(async () => {
      const c = await getChat(chat.id);
      return c.messages.length === 2 ? c : null;
    }, "the partial reply to be stored");
    expect(stored.messages.map((m: any) => [m.role, m.content])).toEqual([
      ["user", "go on"],
      ["assistant", "partial answer"],
    ]);
    await eventually(async () => (await inFlight("up-chat")) === 0, "the slot to be released");
  });

  test("deleting a chat while its reply streams: the stream still ends with [DONE], nothing is left behind", async () => {
    const chat = await createChat();
    const res = await send("POST", `/chats/${chat.id}/stream`, { content: Array.from({ length: 40 }, (_, i) => `d${i}`).join(" ") });
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    await within(reader.nextData(), 5000, "the first chunk");
    expect((await send("DELETE", `/chats/${chat.id}`)).status).toBe(200);
    const rest = await within(reader.rest(), 5000, "the rest of the stream");
    expect(rest[rest.length - 1]).toBe("[DONE]");
    for (const d of rest.slice(0, -1)) expect(JSON.parse(d)).not.toHaveProperty("error");
    await expectError(await send("GET", `/chats/${chat.id}`), 404);
    expect(await messagesOf(chat.id)).toBe(0);
  });

  test("an upstream that breaks off mid-stream: an in-band error event (no internals), the partial reply is stored", async () => {
    up.handler = (r) => {
      let c!: ReadableStreamDefaultController<Uint8Array>;
      const enc = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({ start: (ctl) => void (c = ctl) });
      c.enqueue(enc.encode(`data: ${JSON.stringify(upstreamChunk(r.body.model, { role: "assistant", content: "" }))}\n\n`));
      c.enqueue(enc.encode(`data: ${JSON.stringify(upstreamChunk(r.body.model, { content: "half an" }))}\n\n`));
      // Then garbage instead of a chunk: the engine broke.
      setTimeout(() => {
        c.enqueue(enc.encode("data: {not json at all\n\n"));
        c.close();
      }, 20);
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    };
    const chat = await createChat({ model: "up-chat" });
    const res = await send("POST", `/chats/${chat.id}/stream`, { content: "break" });
    expect(res.status).toBe(200);
    const data = await within(sseReader(res).rest(), 5000, "the stream to end");
    const events = data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d));
    const last = events[events.length - 1];
    expect(Object.keys(last)).toEqual(["error"]);
    expect(Object.keys(last.error).sort()).toEqual(["code", "message", "param", "type"]);
    expect(last.error.type).toBe("server_error");
    expect(last.error.message).not.toMatch(/JSON|Parse|Unexpected|at \//);
    expect((await getChat(chat.id)).messages.map((m: any) => [m.role, m.content])).toEqual([
      ["user", "break"],
      ["assistant", "half an"],
    ]);
  });

  test("an upstream failure before the first byte is a JSON error and stores nothing", async () => {
    up.handler = () => new Response(JSON.stringify({ error: { message: "boom", type: "server_error", param: null, code: null } }), { status: 500, headers: { "content-type": "application/json" } });
    const chat = await createChat({ model: "up-chat" });
    await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: "hello" }), 502, { code: "upstream_error" });
    expect((await getChat(chat.id)).messages).toEqual([]);
    // An upstream 4xx keeps its status and body.
    const refusal = { error: { message: "content too long", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } };
    up.handler = () => new Response(JSON.stringify(refusal), { status: 400, headers: { "content-type": "application/json" } });
    const res = await send("POST", `/chats/${chat.id}/stream`, { content: "hello" });
    expect(res.status).toBe(400);
    expect(await json(res)).toEqual(refusal);
    expect((await getChat(chat.id)).messages).toEqual([]);
  });
});

describe("POST /chat/completions on the slow echo", () => {
  test("a streamed completion whose client disconnects stops and frees its slot", async () => {
    // 6000 tokens at 200 tokens/s: 30 s if nobody stopped it, far longer than the 3 s allowed below, so
    // only the client's leaving can free the slot in time.
    const abort = new AbortController();
    const res = await t.api("/chat/completions", {
      method: "POST",
      signal: abort.signal,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "offpeak-echo", stream: true, messages: [{ role: "user", content: Array.from({ length: 6000 }, (_, i) => `c${i}`).join(" ") }] }),
    });
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    for (let i = 0; i < 3; i++) await within(reader.nextData(), 5000, "a chunk");
    expect(await inFlight("offpeak-echo")).toBe(1);
    // Read on until the client leaves (a body left unread to the garbage collector may be closed without the abort).
    const reading = (async () => {
      try {
        while (await reader.next());
      } catch {}
    })();
    abort.abort();
    await eventually(async () => (await inFlight("offpeak-echo")) === 0, "the slot to be released", 3000);
    await reading;
  });
});

describe("projects", () => {
  test("another project's chat answers 404 exactly like an unknown id, and nothing happens to it", async () => {
    const theirs = await createChat({ model: "offpeak-echo", system: "theirs" }, otherKey);
    await turn(theirs.id, "their message", {}, otherKey);
    const unknown = "chat_" + "Z".repeat(24);
    const shape = async (res: Response, id: string) => {
      expect(res.status).toBe(404);
      return JSON.stringify(await json(res)).split(id).join("<ID>");
    };
    const cases: [string, string, unknown][] = [
      ["GET", "", undefined],
      ["DELETE", "", undefined],
      ["POST", "/stream", { content: "sneaky" }],
    ];
    for (const [method, suffix, body] of cases) {
      const foreign = await shape(await send(method, `/chats/${theirs.id}${suffix}`, body), theirs.id);
      const missing = await shape(await send(method, `/chats/${unknown}${suffix}`, body), unknown);
      expect(foreign).toBe(missing);
      expect(JSON.parse(foreign).error.type).toBe("not_found_error");
    }
    // Listings are per project.
    const mine = await json(await t.api("/chats?limit=100"));
    expect(mine.data.map((c: any) => c.id)).not.toContain(theirs.id);
    const their = await json(await send("GET", "/chats?limit=100", undefined, otherKey));
    expect(their.data.every((c: any) => c.id !== undefined)).toBe(true);
    expect(their.data.map((c: any) => c.id)).toContain(theirs.id);
    // Untouched: not deleted, no "sneaky" message.
    const after = await getChat(theirs.id, otherKey);
    expect(after.messages.map((m: any) => m.content)).toEqual(["their message", "their message"]);
    // And the other direction.
    const ours = await createChat();
    await expectError(await send("GET", `/chats/${ours.id}`, undefined, otherKey), 404);
  });
});

describe("bad input stores nothing", () => {
  const count = () => rowsIn("chats");
  const messages = () => rowsIn("chatMessages");

  test("POST /chats: malformed JSON, missing/bad model, bad system/metadata → 4xx naming the param; no chat row", async () => {
    const before = await count();
    const raw = (body: string, type = "application/json") => t.api("/chats", { method: "POST", headers: { "content-type": type }, body });
    await expectError(await raw("{not json"), 400);
    await expectError(await raw(""), 400);
    await expectError(await raw('{"model": "offpeak-echo"', "application/json"), 400);
    await expectError(await send("POST", "/chats", {}), 400, { param: "model" });
    await expectError(await send("POST", "/chats", { model: 5 }), 400, { param: "model" });
    await expectError(await send("POST", "/chats", { model: "" }), 400, { param: "model" });
    await expectError(await send("POST", "/chats", { model: "no-such-model" }), 404, { code: "model_not_found", param: "model" });
    await expectError(await send("POST", "/chats", { model: "offpeak-echo", system: 5 }), 400, { param: "system" });
    await expectError(await send("POST", "/chats", { model: "offpeak-echo", metadata: ["a"] }), 400, { param: "metadata" });
    await expectError(await send("POST", "/chats", { model: "offpeak-echo", metadata: { k: 1 } }), 400, { param: "metadata" });
    const huge = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
    await expectError(await send("POST", "/chats", { model: "offpeak-echo", metadata: huge }), 400, { param: "metadata" });
    await expectError(await send("POST", "/chats", { model: "offpeak-echo", metadata: { k: "v".repeat(513) } }), 400, { param: "metadata" });
    // An embeddings model cannot hold a chat.
    const wrongKind = await send("POST", "/chats", { model: "offpeak-embed" });
    expect([400, 404]).toContain(wrongKind.status);
    expect((await json(wrongKind)).error.param).toBe("model");
    expect(await count()).toBe(before);
    // Unknown fields are ignored.
    const ok = await send("POST", "/chats", { model: "offpeak-echo", colour: "blue" });
    expect(ok.status).toBe(200);
    expect(await count()).toBe(before + 1);
  });

  test("POST /chats/{id}/stream: malformed JSON, missing/empty/bad content, bad max_tokens/temperature → 400 naming the param; no message", async () => {
    const chat = await createChat();
    const before = await messages();
    const raw = (body: string) => t.api(`/chats/${chat.id}/stream`, { method: "POST", headers: { "content-type": "application/json" }, body });
    await expectError(await raw("{oops"), 400);
    await expectError(await send("POST", `/chats/${chat.id}/stream`, {}), 400, { param: "content" });
    await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: 5 }), 400, { param: "content" });
    await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: "" }), 400, { param: "content" });
    for (const max_tokens of [0, -3, 1.5, "10"]) await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: "x", max_tokens }), 400, { param: "max_tokens" });
    for (const temperature of [-0.1, 2.5, "hot"]) await expectError(await send("POST", `/chats/${chat.id}/stream`, { content: "x", temperature }), 400, { param: "temperature" });
    expect(await messages()).toBe(before);
    expect((await getChat(chat.id)).messages).toEqual([]);
  });
});

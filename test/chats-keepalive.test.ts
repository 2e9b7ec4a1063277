// docs/CONTRACT.md §6: a chat-session stream sends `: keep-alive` comments while nothing
// else goes out, so proxies do not drop a quiet stream. The interval is
// configured (OFFPEAK_SSE_KEEPALIVE_MS, default 15 s); here INTERVAL_MS,
// against an upstream that sends its first chunk at once and then stays
// silent for SILENCE_MS, and against upstreams that send no headers at all
// for SILENCE_MS. The interval is long beside what a busy machine adds to a
// timer (a CPU quota holds a process for tens of ms), short beside the test.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { configWriter, json, jsonResponse, lastUserText, pushStream, readAllSse, sleep, sseReader, startScriptedUpstream, upstreamChunk, upstreamCompletion, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { waitFor } from "./helpers/wait";

let t: TestServer;
let up: ScriptedUpstream;
const INTERVAL_MS = 400;
/** Several intervals of nothing from the upstream. */
const SILENCE_MS = 5 * INTERVAL_MS;

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["quiet-chat"] });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_SSE_KEEPALIVE_MS: String(INTERVAL_MS), OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
});

test("a quiet stream gets `: keep-alive` comments while nothing else goes out, then the answer and [DONE]", async () => {
  up.handler = (r) => {
    const s = pushStream(r);
    (async () => {
      s.data(upstreamChunk("quiet-chat", { role: "assistant", content: "" }, null));
      await sleep(SILENCE_MS);
      s.data(upstreamChunk("quiet-chat", { content: "late" }, null));
      s.data(upstreamChunk("quiet-chat", {}, "stop"));
      s.send("data: [DONE]\n\n");
      s.close();
    })();
    return s.response;
  };
  const chat = await json(await t.api("/chats", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "quiet-chat" }) }));
  const res = await t.api(`/chats/${chat.id}/stream`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "hello?" }) });
  expect(res.status).toBe(200);
  const { chunks, raw } = await readAllSse(res);
  const events = raw.split("\n\n");
  const firstData = events.findIndex((e) => e.startsWith("data:"));
  const secondData = events.findIndex((e, i) => i > firstData && e.startsWith("data:"));
  // SILENCE_MS of silence: several comments, all between the first and second events.
  const between = events.slice(firstData + 1, secondData);
  expect(between.length).toBeGreaterThanOrEqual(2);
  expect(between.every((e) => e === ": keep-alive")).toBe(true);
  expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("late");
  expect(raw.trimEnd().endsWith("data: [DONE]")).toBe(true);
});

const newChat = async () => json(await t.api("/chats", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "quiet-chat" }) }));
const say = (chatId: string, content: string) => t.api(`/chats/${chatId}/stream`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ content }) });
/** An upstream that sends nothing, not even headers, for `ms`, then streams `content` whole. */
const answersAfter = (ms: number, content: string) => async (r: Parameters<ScriptedUpstream["handler"]>[0]) => {
  await sleep(ms);
  const s = pushStream(r);
  s.data(upstreamChunk("quiet-chat", { role: "assistant", content }, null));
  s.data(upstreamChunk("quiet-chat", {}, "stop"));
  s.send("data: [DONE]\n\n");
  s.close();
  return s.response;
};
/** The stream began with two or more `: keep-alive` comments and nothing else before its first data event. */
function expectKeepAlivesFirst(raw: string): void {
  const events = raw.split("\n\n");
  const firstData = events.findIndex((e) => e.startsWith("data:"));
  expect(firstData).toBeGreaterThanOrEqual(2);
  expect(events.slice(0, firstData).every((e) => e === ": keep-alive")).toBe(true);
}
const messagesOf = async (chatId: string) => ((await json(await t.api(`/chats/${chatId}`))).messages as { role: string; content: string }[]).map((m) => `${m.role}:${m.content}`);

test("an upstream that sends no headers for a while: the stream starts with keep-alive comments, then the answer; both messages are stored", async () => {
  up.handler = answersAfter(SILENCE_MS, "at last");
  const chat = await newChat();
  const res = await say(chat.id, "anyone?");
  expect(res.status).toBe(200);
  const { chunks, raw } = await readAllSse(res);
  expectKeepAlivesFirst(raw);
  expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("at last");
  expect(await messagesOf(chat.id)).toEqual(["user:anyone?", "assistant:at last"]);
});

test("an upstream that refuses after the stream has started: its error body is the last event (no [DONE]), nothing is stored", async () => {
  const refusal = { error: { message: "context too long", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } };
  up.handler = async () => {
    await sleep(SILENCE_MS);
    return jsonResponse(refusal, 400);
  };
  const chat = await newChat();
  const res = await say(chat.id, "too much");
  expect(res.status).toBe(200);
  const r = sseReader(res);
  const seen: { data: string | null; comments: string[] }[] = [];
  for (let e = await r.next(); e; e = await r.next()) seen.push(e);
  const data = seen.filter((e) => e.data !== null).map((e) => e.data);
  expect(seen[0]!.comments).toEqual(["keep-alive"]);
  expect(data).toEqual([JSON.stringify(refusal)]);
  expect(await messagesOf(chat.id)).toEqual([]);
});

test("an upstream answering within the interval still passes a 4xx through with its status", async () => {
  up.handler = () => jsonResponse({ error: { message: "bad temperature", type: "invalid_request_error", param: "temperature", code: null } }, 400);
  const chat = await newChat();
  const res = await say(chat.id, "hi");
  expect(res.status).toBe(400);
  expect(((await res.json()) as { error: { message: string } }).error.message).toBe("bad temperature");
  expect(await messagesOf(chat.id)).toEqual([]);
});

test("no gap between bytes is longer than the interval, from the request on (the first comment goes out when the stream starts early)", async () => {
  up.handler = answersAfter(SILENCE_MS, "ok");
  const chat = await newChat();
  const sent = performance.now();
  const res = await say(chat.id, "gaps?");
  const arrivals = [performance.now()];
  const reader = res.body!.getReader();
  for (;;) {
    const { done } = await reader.read();
    if (done) break;
    arrivals.push(performance.now());
  }
  const gaps = arrivals.map((at, i) => at - (i === 0 ? sent : arrivals[i - 1]!));
  // Before, the first byte came after two intervals plus a tick; now none is much over one.
  expect(Math.max(...gaps)).toBeLessThan(1.75 * INTERVAL_MS);
});

test("a chat deleted while its upstream opens: 404 before the stream starts, and the model's slot comes back", async () => {
  const chat = await newChat();
  up.handler = async (r) => {
    await t.api(`/chats/${chat.id}`, { method: "DELETE" });
    // Its headers go out with its first chunk, well within the interval.
    const s = pushStream(r);
    s.data(upstreamChunk("quiet-chat", { role: "assistant", content: "too late" }, null));
    return s.response;
  };
  const res = await say(chat.id, "gone?");
  expect(res.status).toBe(404);
  expect(t.server.ctx.scheduler.stats("quiet-chat").inFlight).toBe(0);
});

test("a chat deleted while its upstream opens, after the stream started: a not_found event ends it, nothing is stored", async () => {
  const chat = await newChat();
  up.handler = async (r) => {
    await sleep(2 * INTERVAL_MS);
    await t.api(`/chats/${chat.id}`, { method: "DELETE" });
    const s = pushStream(r);
    s.data(upstreamChunk("quiet-chat", { role: "assistant", content: "late" }, null));
    return s.response;
  };
  const res = await say(chat.id, "gone later?");
  expect(res.status).toBe(200);
  const r = sseReader(res);
  const data: string[] = [];
  for (let e = await r.next(); e; e = await r.next()) if (e.data !== null) data.push(e.data);
  expect(data.map((d) => JSON.parse(d).error?.code)).toEqual(["not_found"]);
  expect((await t.api(`/chats/${chat.id}`)).status).toBe(404);
  expect(t.server.ctx.scheduler.stats("quiet-chat").inFlight).toBe(0);
});

test("the interval is checked at start: out of range is a configuration error", async () => {
  const { resolveConfig } = await import("../src/config");
  expect(() => resolveConfig(["--port", "0"], { OFFPEAK_SSE_KEEPALIVE_MS: "5" })).toThrow();
  expect(resolveConfig(["--port", "0"], {}).sseKeepAliveMs).toBe(15_000);
});

describe("a session stream waiting in a busy model's queue", () => {
  // The upstream model takes one request at a time (max_concurrency 1); a
  // "hold" request keeps it for SILENCE_MS, any other is answered at once. The
  // keep-alive interval is INTERVAL_MS.
  let busy: TestServer;
  const configs = configWriter("offpeak-queue-keepalive-");
  beforeAll(async () => {
    const config = configs.write("config.json", { upstreams: [{ name: "one-at-a-time", base_url: up.baseUrl, models: ["quiet-chat"], max_concurrency: 1, queue_size: 4 }] });
    busy = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_SSE_KEEPALIVE_MS: String(INTERVAL_MS), OFFPEAK_BATCH_WORKERS: "1" } });
  });
  afterAll(async () => {
    await busy?.stop();
    configs.cleanup();
  });
  const post = (path: string, body: unknown, signal?: AbortSignal) =>
    busy.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal });
  /** Holds the model's only slot for SILENCE_MS. */
  const occupy = () => {
    up.handler = async (r) => {
      if (lastUserText(r.body) === "hold") await sleep(SILENCE_MS);
      return r.body.stream ? answersAfter(0, lastUserText(r.body))(r) : jsonResponse(upstreamCompletion(r.body));
    };
    return post("/chat/completions", { model: "quiet-chat", messages: [{ role: "user", content: "hold" }] });
  };

  /** Until the "hold" request has the slot (it reached the upstream). */
  const held = () => waitFor(() => up.requests.filter((r) => lastUserText(r.body) === "hold").length > holds, "the hold request at the upstream").then(() => holds++);
  let holds = 0;

  test("gets keep-alive comments while queued, then its reply; both messages are stored", async () => {
    const chat = await json(await post("/chats", { model: "quiet-chat" }));
    const holder = occupy();
    await held();
    const res = await post(`/chats/${chat.id}/stream`, { content: "waiting" });
    expect(res.status).toBe(200);
    const { chunks, raw } = await readAllSse(res);
    // The upstream answers this one at once: every comment before its data was sent while queued.
    expectKeepAlivesFirst(raw);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("waiting");
    expect((await holder).status).toBe(200);
    const messages = ((await json(await busy.api(`/chats/${chat.id}`))).messages as { role: string; content: string }[]).map((m) => `${m.role}:${m.content}`);
    expect(messages).toEqual(["user:waiting", "assistant:waiting"]);
  });

  test("a client that leaves while queued: nothing stored, and the queue place is given back", async () => {
    const chat = await json(await post("/chats", { model: "quiet-chat" }));
    const holder = occupy();
    await held();
    const leave = new AbortController();
    const res = await post(`/chats/${chat.id}/stream`, { content: "never mind" }, leave.signal);
    expect(res.status).toBe(200);
    const reader = sseReader(res);
    await reader.next(); // the first keep-alive
    // Read on, so that the stream stays open (an unread body left to the garbage collector is
    // closed too, and the test would pass without the abort) until the client leaves.
    const reading = (async () => {
      try {
        while (await reader.next());
      } catch {}
    })();
    leave.abort();
    await reading;
    expect((await holder).status).toBe(200);
    const status = await json(await busy.api("/status"));
    expect(status.models.find((m: { id: string }) => m.id === "quiet-chat")).toMatchObject({ in_flight: 0, queued: 0 });
    const next = await post("/chat/completions", { model: "quiet-chat", messages: [{ role: "user", content: "next" }] });
    expect(next.status).toBe(200);
    // One slot, taken in turn: had it still been queued, it would have reached the upstream before "next".
    expect(up.requests.map((r) => lastUserText(r.body))).not.toContain("never mind");
    expect((await json(await busy.api(`/chats/${chat.id}`))).messages).toEqual([]);
  });
});

// SPEC §6: a chat-session stream sends `: keep-alive` comments while nothing
// else goes out, so proxies do not drop a quiet stream. The interval is
// configured (OFFPEAK_SSE_KEEPALIVE_MS, default 15 s); here 150 ms, against an
// upstream that sends its first chunk at once and then stays silent for 700 ms.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { json, pushStream, readAllSse, sleep, startScriptedUpstream, upstreamChunk, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let up: ScriptedUpstream;

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["quiet-chat"] });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_SSE_KEEPALIVE_MS: "150", OFFPEAK_BATCH_WORKERS: "1" } });
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
      await sleep(700);
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
  // 700 ms of silence at a 150 ms interval: several comments, all between the first and second events.
  const between = events.slice(firstData + 1, secondData);
  expect(between.length).toBeGreaterThanOrEqual(2);
  expect(between.every((e) => e === ": keep-alive")).toBe(true);
  expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("late");
  expect(raw.trimEnd().endsWith("data: [DONE]")).toBe(true);
});

test("the interval is checked at start: out of range is a configuration error", async () => {
  const { resolveConfig } = await import("../src/config");
  expect(() => resolveConfig(["--port", "0"], { OFFPEAK_SSE_KEEPALIVE_MS: "5" })).toThrow();
  expect(resolveConfig(["--port", "0"], {}).sseKeepAliveMs).toBe(15_000);
});

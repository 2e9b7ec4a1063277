// docs/CONTRACT.md §11, interactive side: while an upstream is down, requests for its
// models answer 503 (server_error, upstream_unavailable) with retry-after at
// once, instead of waiting for a connection or a timeout; GET /status and
// /metrics show the state and its changes.
//
// "At once" is proved without timing: once the server knows the upstream is
// down, the fake engine comes back in a mode that accepts connections and
// never answers. A server that still sent the request would hang until the
// client gives up (5 s here, well under the upstream's 30 s timeout), and
// the engine would count the request; the fast path sends nothing.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { pollUntil } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { expectError } from "./helpers/inference";
import { readStatus, scrapeMetrics, stateChanges, upGauge, writeUpstreamConfig, type Samples } from "./helpers/outage";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const NAME = "outage-i";
/** How long a client waits before it calls a request hung. */
const CLIENT_WAIT_MS = 5000;

let fake: FakeUpstream;
let t: TestServer;
let client: OpenAI;
let cleanup = () => {};
let before: Samples;

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat", "fake-embed"] });
  const cfg = writeUpstreamConfig("offpeak-outage-i-", { name: NAME, base_url: fake.baseUrl, models: ["fake-chat", "fake-embed"], timeout_s: 30 });
  cleanup = cfg.cleanup;
  t = await startTestServer({ argv: ["--config", cfg.path], env: { OFFPEAK_BATCH_WORKERS: "1" } });
  client = t.sdk();
  before = await scrapeMetrics(t.api);
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  cleanup();
});

const post = (path: string, body: unknown) =>
  t.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(CLIENT_WAIT_MS) });
const chatBody = (content: string, extra: Record<string, unknown> = {}) => ({ model: "fake-chat", messages: [{ role: "user", content }], ...extra });

/** The fast 503 of docs/CONTRACT.md §11: OpenAI error body, server_error / upstream_unavailable, a retry-after in whole seconds. */
async function expectUnavailable(res: Response) {
  const retryAfter = res.headers.get("retry-after");
  await expectError(res, 503, { type: "server_error", code: "upstream_unavailable" });
  expect(retryAfter ?? "(none)").toMatch(/^\d+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
}

describe("interactive requests and an upstream that goes down", () => {
  let downAt = 0;

  test("while up: answered; GET /status lists the upstream healthy; /metrics has it up", async () => {
    const r = await client.chat.completions.create({ model: "fake-chat", messages: [{ role: "user", content: "hello" }] });
    expect(r.choices[0]!.message.content).toBe("hello");
    const s = await readStatus(t.api, NAME);
    expect(s.raw.upstreams).toEqual([{ name: NAME, healthy: true, since: expect.any(Number), last_error: null }]);
    expect(s.status).toBe("ok");
    expect(upGauge(await scrapeMetrics(t.api), NAME)).toBe(1);
  });

  test("connections refused: after a few failures the upstream is down and requests get the fast 503", async () => {
    await fake.down();
    downAt = Date.now();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await post("/chat/completions", chatBody(`refused ${i}`));
      statuses.push(res.status);
      if (res.status === 503) {
        await expectUnavailable(res);
        break;
      }
      await res.text();
    }
    // A few 502s while the failures add up, then 503.
    expect({ statuses, last: statuses.at(-1) }).toEqual({ statuses, last: 503 });
  });

  test("an engine that now accepts connections and never answers: still 503 at once (plain, streamed, embeddings), nothing sent to it", async () => {
    fake.hang = true;
    await fake.up();
    const sent = fake.stats.requests;
    await expectUnavailable(await post("/chat/completions", chatBody("plain")));
    await expectUnavailable(await post("/chat/completions", chatBody("streamed", { stream: true, stream_options: { include_usage: true } })));
    await expectUnavailable(await post("/embeddings", { model: "fake-embed", input: "embed me" }));
    // The official SDK sees an APIError with the status, code and header.
    const e = await client.chat.completions.create(chatBody("sdk") as any, { timeout: CLIENT_WAIT_MS }).then(
      () => null,
      (x) => x,
    );
    expect(e).toBeInstanceOf(OpenAI.APIError);
    expect({ status: e.status, type: e.type, code: e.code }).toEqual({ status: 503, type: "server_error", code: "upstream_unavailable" });
    expect(e.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(fake.stats.requests - sent).toBe(0);
  }, SCENARIO_MS);

  test("while down: GET /status is degraded with {name, healthy:false, since, last_error}; /metrics has it down and the change counted", async () => {
    const s = await readStatus(t.api, NAME);
    expect(s.status).toBe("degraded");
    expect(s.raw.upstreams).toEqual([{ name: NAME, healthy: false, since: expect.any(Number), last_error: expect.any(String) }]);
    const u = s.upstream!;
    expect(Number.isInteger(u.since)).toBe(true);
    expect(u.since).toBeGreaterThanOrEqual(Math.floor(downAt / 1000));
    expect(u.since).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    expect(u.last_error!.length).toBeGreaterThan(0);
    // The model stays listed; only the upstream is down.
    expect((await t.api("/models/fake-chat")).status).toBe(200);
    const m = await scrapeMetrics(t.api);
    expect(upGauge(m, NAME)).toBe(0);
    expect(stateChanges(m, NAME, "down") - stateChanges(before, NAME, "down")).toBe(1);
  });

  test("the engine back: the upstream is up again (status ok, healthy, metrics 1, change counted) and requests are answered", async () => {
    fake.hang = false;
    // Drops what hung, then listens normally on the same port.
    await fake.down();
    await fake.up();
    const s = await pollUntil(() => readStatus(t.api, NAME), (x) => x.upstream?.healthy === true, 30_000, 200, "the upstream to be up again");
    expect(s.status).toBe("ok");
    expect(s.upstream!.since).toBeGreaterThanOrEqual(Math.floor(downAt / 1000));
    const m = await scrapeMetrics(t.api);
    expect(upGauge(m, NAME)).toBe(1);
    expect(stateChanges(m, NAME, "up") - stateChanges(before, NAME, "up")).toBe(1);
    expect(fake.stats.probes).toBeGreaterThan(0);
    const r = await client.chat.completions.create({ model: "fake-chat", messages: [{ role: "user", content: "back" }] });
    expect(r.choices[0]!.message.content).toBe("back");
  }, SCENARIO_MS);
});

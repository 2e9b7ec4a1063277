// docs/CONTRACT.md §5: request_counts move while the batch runs (updated at least every
// second), also against a slow model whose requests finish in bursts: the
// counts of a burst must show before the next request finishes.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { chatReq, createBatch, pollUntil, sleep } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

let t: TestServer;
let fake: FakeUpstream;
const LATENCY_MS = 2000;
beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["slow-chat"], latencyMs: LATENCY_MS });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: fake.baseUrl, OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
});

test("a burst of finished requests shows in request_counts within a second, not a request latency later", async () => {
  const client = t.sdk();
  const lines = Array.from({ length: 150 }, (_, i) => chatReq(`s-${i}`, `line ${i}`, { model: "slow-chat" }));
  const { batch } = await createBatch(client, lines);
  // The first requests are all sent at once and answered together after LATENCY_MS.
  const answered = await pollUntil(async () => fake.stats.requests - fake.stats.inFlight, (n) => n >= 10, 10_000, 20, "a first burst of answers");
  const at = performance.now();
  // The counts show the burst (the target is within a second; the fault this guards against showed
  // it only when the next request finished, a request latency later): judged against that latency,
  // so that a busy machine's slower writes do not decide it.
  const b = await pollUntil(() => client.batches.retrieve(batch.id), (x) => x.request_counts!.completed >= answered || x.status !== "in_progress", 10_000, 50, "the burst in request_counts");
  const tookMs = performance.now() - at;
  expect(b.status).toBe("in_progress");
  expect({ completed: b.request_counts!.completed >= answered, beforeNextLatency: tookMs < LATENCY_MS }).toEqual({ completed: true, beforeNextLatency: true });
  await client.batches.cancel(batch.id);
}, SCENARIO_MS);

test("cancel after the deadline, while the last requests still run: the record as it is (200, not 409), and the batch ends expired", async () => {
  // One "h" of completion_window lasts 3 s here; the upstream takes 9 s: the line is still at the
  // upstream well past the deadline, however long this machine took to start it.
  const short = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: fake.baseUrl, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_HOUR_SECONDS: "3" } });
  fake.latencyMs = 9000;
  try {
    const client = short.sdk();
    const { batch } = await createBatch(client, [chatReq("e-1", "past the deadline", { model: "slow-chat" })], { window: "1h" });
    // This batch's line at the upstream (the previous test's cancelled lines may still be there too).
    await pollUntil(async () => fake.counts.get("past the deadline") ?? 0, (n) => n >= 1, 20_000, 20, "the request to reach the upstream");
    // Past the deadline by a second, with the request still at the upstream.
    await sleep(Math.max(0, (batch.expires_at! + 1) * 1000 - Date.now()));
    const res = await short.api(`/batches/${batch.id}/cancel`, { method: "POST" });
    const body = (await res.json()) as { status: string };
    expect({ status: res.status, state: body.status }).toEqual({ status: 200, state: "in_progress" });
    const done = await pollUntil(() => client.batches.retrieve(batch.id), (b) => ["completed", "expired", "cancelled", "failed"].includes(b.status), 20_000, 100, "the batch to end");
    expect(done.status).toBe("expired");
  } finally {
    fake.latencyMs = LATENCY_MS;
    await short.stop();
  }
}, SCENARIO_MS);

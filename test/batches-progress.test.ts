// SPEC §5: request_counts move while the batch runs (updated at least every
// second), also against a slow model whose requests finish in bursts: the
// counts of a burst must show before the next request finishes.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { chatReq, createBatch, pollUntil, sleep } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";

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
  await sleep(1000); // the next burst is ≈1 s away
  const b = await client.batches.retrieve(batch.id);
  expect(b.status).toBe("in_progress");
  expect(b.request_counts!.completed).toBeGreaterThanOrEqual(answered);
  await client.batches.cancel(batch.id);
}, 20_000);

// Batch Workers take free scheduler slots straight from shared memory
// (inference/admission/scheduler.ts, batches/worker/slots.ts). Two Workers and
// interactive requests together must still never put more than
// max_concurrency requests in flight upstream, and interactive requests
// must get their slots while the batch keeps the model saturated.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, pollUntil, readResults, waitBatch } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const LIMIT = 4;
let t: TestServer;
let fake: FakeUpstream;
const dir = mkdtempSync(join(tmpdir(), "offpeak-shared-slots-"));
beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 3 });
  const cfg = join(dir, "c.json");
  writeFileSync(cfg, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: LIMIT, queue_size: 64 }] }));
  t = await startTestServer({ argv: ["--config", cfg], env: { OFFPEAK_BATCH_WORKERS: "2" } });
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("two Workers and interactive traffic share max_concurrency slots without exceeding them", async () => {
  const client = t.sdk();
  const N = 1500;
  const lines = Array.from({ length: N }, (_, i) => chatReq(`s-${i}`, `line ${i}`, { model: "fake-chat" }));
  fake.stats.maxInFlight = 0;
  const { batch } = await createBatch(client, lines);
  await pollUntil(async () => fake.stats.requests, (n) => n >= 50, 10_000);

  // Interactive requests while the batch holds every slot: they are served
  // (interactive first), not starved behind the batch's queue.
  const answers = await Promise.all(
    Array.from({ length: 24 }, (_, i) => client.chat.completions.create({ model: "fake-chat", messages: [{ role: "user", content: `interactive ${i}` }] })),
  );
  const mid = await client.batches.retrieve(batch.id);

  const done = await waitBatch(client, batch.id, undefined, 60_000);
  const out = await readResults(client, done.output_file_id);
  expect({
    interactive: answers.filter((a) => a.choices[0]?.message.content?.includes("interactive")).length,
    batchStillRunningWhileServed: mid.status === "in_progress" && mid.request_counts!.completed < N,
    status: done.status,
    counts: done.request_counts,
    distinct: new Set(out.map((l) => l.custom_id)).size,
    withinLimit: fake.stats.maxInFlight <= LIMIT,
    slotsUsed: fake.stats.maxInFlight >= 2,
  }).toEqual({
    interactive: 24,
    batchStillRunningWhileServed: true,
    status: "completed",
    counts: { total: N, completed: N, failed: 0 },
    distinct: N,
    withinLimit: true,
    slotsUsed: true,
  });

  // Every slot came back: nothing holds one once the batch is done.
  const metrics = await t.api("/metrics").then((r) => r.text());
  const gauges = metrics.split("\n").filter((l) => l.startsWith("offpeak_model_in_flight{") && l.includes('model="fake-chat"'));
  expect(gauges.length).toBeGreaterThan(0);
  expect(gauges.map((l) => Number(l.trim().split(/\s+/).pop())).reduce((a, b) => a + b, 0)).toBe(0);
}, SCENARIO_MS);

test("a shutdown that cuts requests off gives back the slots the Workers took themselves", async () => {
  // Its own server: stopping it is the test. Requests outlast the 7 s checkpoint grace, so the Workers are terminated with slots held.
  const slow = await startFakeUpstream({ models: ["slow-chat"], latencyMs: 9000 });
  const cfg = join(dir, "slow.json");
  writeFileSync(cfg, JSON.stringify({ upstreams: [{ name: "slow", base_url: slow.baseUrl, models: ["slow-chat"], max_concurrency: 64 }] }));
  const s = await startTestServer({ argv: ["--config", cfg], env: { OFFPEAK_BATCH_WORKERS: "1" } });
  try {
    await createBatch(s.sdk(), Array.from({ length: 8 }, (_, i) => chatReq(`k-${i}`, `line ${i}`, { model: "slow-chat" })));
    await pollUntil(async () => slow.stats.inFlight, (n) => n >= 8, 10_000);
    expect(s.server.ctx.scheduler.stats("slow-chat").inFlight).toBe(8);
    await s.stop();
    expect(s.server.ctx.scheduler.stats("slow-chat").inFlight).toBe(0);
  } finally {
    await slow.stop();
  }
}, SCENARIO_MS);

// Lines queued for a scheduler slot (a model with max_concurrency 1 and a
// slow upstream): a cancel must not send them, and request_counts must keep
// moving while a shard's last lines wait their turn.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, pollUntil, readResults, waitBatch } from "./helpers/batches";
import { SCENARIO_MS } from "./helpers/wait";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let fake: FakeUpstream;
const dir = mkdtempSync(join(tmpdir(), "offpeak-slots-"));
beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 250 });
  const cfg = join(dir, "c.json");
  writeFileSync(cfg, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 1 }] }));
  t = await startTestServer({ argv: ["--config", cfg], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("cancel", () => {
  test("after a cancel, lines still waiting for a scheduler slot are not sent upstream", async () => {
    const client = t.sdk();
    const lines = Array.from({ length: 12 }, (_, i) => chatReq(`c-${i}`, `line ${i}`, { model: "fake-chat" }));
    const { batch } = await createBatch(client, lines);
    await pollUntil(async () => fake.stats.requests, (n) => n >= 1, 20_000);
    await client.batches.cancel(batch.id);
    const sentAtCancel = fake.stats.requests;
    const done = await waitBatch(client, batch.id, undefined, 20_000);
    const err = await readResults(client, done.error_file_id);
    const cancelledLines = err.filter((l) => l.error?.code === "batch_cancelled").length;
    // At most the one request in flight at the cancel (plus one racing) may still go out.
    expect({ status: done.status, sentAfterCancel: fake.stats.requests - sentAtCancel }).toEqual({ status: "cancelled", sentAfterCancel: Math.min(fake.stats.requests - sentAtCancel, 1) });
    expect(cancelledLines).toBeGreaterThanOrEqual(10);
  }, SCENARIO_MS);
});

describe("progress", () => {
  test("request_counts move while the last (< 128) lines of a shard wait for a slot", async () => {
    const client = t.sdk();
    const lines = Array.from({ length: 15 }, (_, i) => chatReq(`p-${i}`, `line ${i}`, { model: "fake-chat" }));
    const { batch } = await createBatch(client, lines);
    // The counts reach 5 while lines of the shard still wait (one at a time, 250 ms each): they moved
    // before the shard ended, whatever the machine's pace.
    const b = await pollUntil(() => client.batches.retrieve(batch.id), (x) => x.request_counts!.completed >= 5 || !["validating", "in_progress"].includes(x.status), 20_000, 25, "5 lines counted");
    const sentThen = fake.stats.requests;
    expect({ status: b.status, completed: b.request_counts!.completed >= 5, linesStillWaiting: sentThen < 15 }).toEqual({ status: "in_progress", completed: true, linesStillWaiting: true });
    await client.batches.cancel(batch.id);
  }, SCENARIO_MS);
});

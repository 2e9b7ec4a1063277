// request_counts must move while a batch runs (SPEC §5, "updated at least every second").
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, pollUntil, sleep } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let fake: FakeUpstream;
const dir = mkdtempSync(join(tmpdir(), "offpeak-review-"));
beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 200 });
  const cfg = join(dir, "c.json");
  writeFileSync(cfg, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 1 }] }));
  t = await startTestServer({ argv: ["--config", cfg], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("progress", () => {
  test("request_counts move while the last (< 128) lines of a shard wait for a slot", async () => {
    const client = t.sdk();
    const lines = Array.from({ length: 15 }, (_, i) => chatReq(`p-${i}`, `line ${i}`, { model: "fake-chat" }));
    const { batch } = await createBatch(client, lines);
    await pollUntil(async () => fake.stats.requests, (n) => n >= 1, 3000);
    await sleep(2000); // ≈10 requests done upstream by now
    const b = await client.batches.retrieve(batch.id);
    expect({ status: b.status, upstreamDone: fake.stats.requests >= 8, completed: b.request_counts!.completed >= 5 }).toEqual({ status: "in_progress", upstreamDone: true, completed: true });
    await client.batches.cancel(batch.id);
  }, 8000);
});

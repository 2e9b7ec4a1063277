// A batch of one shard on a model with max_concurrency "auto" (docs/CONTRACT.md §18):
// the shard's lines in flight follow the model's limit, so the controller
// can raise the limit past any fixed per-shard bound (64) up to
// max_concurrency_limit while the engine's throughput still rises
// (src/batches/worker/runShard.ts boundFor).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, pollUntil, waitBatch } from "./helpers/batches";
import { startEngineModel, type EngineModel, type EngineShape } from "./helpers/engineModel";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

// Throughput rises up to 160 in flight: the controller's slow start goes past 64 within a few windows.
// A second a request: past 96 in flight that is ~100 requests a second, little enough CPU that a busy
// 2-core machine still feeds the engine as fast as it answers (with 400 ms, a starved machine, not the
// engine, was what stopped the limit's rise).
const shape: EngineShape = { unloadedMs: 1000, knee: 160, cliff: 240, failAt: 400 };
let engine: EngineModel;
let t: TestServer;
const dir = mkdtempSync(join(tmpdir(), "offpeak-one-shard-"));

beforeAll(async () => {
  engine = await startEngineModel(shape, { models: ["engine-chat"] });
  writeFileSync(join(dir, "c.json"), JSON.stringify({ upstreams: [{ name: "engine", base_url: engine.baseUrl, models: ["engine-chat"] }] }));
  t = await startTestServer({ argv: ["--config", join(dir, "c.json")], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await engine?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("one shard, one Worker: the controller's limit and the requests in flight go past 64", async () => {
  const client = t.sdk();
  const { batch } = await createBatch(client, Array.from({ length: 6000 }, (_, i) => chatReq(`o-${i}`, `line ${i}`, { model: "engine-chat" })));
  engine.reset();
  const limit = () => t.server.ctx.scheduler.adaptiveState("engine-chat")?.limit ?? 0;
  let most = 0;
  await pollUntil(
    async () => (most = Math.max(most, limit())),
    (m) => m > 96 && engine.stats().maxInFlight > 64,
    30_000,
    50,
    "the limit past 96 and more than 64 in flight",
  ).catch(() => {});
  const state = t.server.ctx.scheduler.adaptiveState("engine-chat")!;
  const trace = state.trace.map((p) => `${p.limit}:${p.decision}`).join(" ");
  expect({ limitPast96: most > 96, inFlightPast64: engine.stats().maxInFlight > 64, trace }).toMatchObject({ limitPast96: true, inFlightPast64: true });
  await client.batches.cancel(batch.id);
  await waitBatch(client, batch.id, undefined, 30_000);
}, SCENARIO_MS);

// Each replica finds its own limit (docs/CONTRACT.md §18, §21): one model on
// two engines of different size, max_concurrency "auto". The small engine
// runs 4 requests at once (more only wait inside it), the large one 32. Each
// replica's controller measures its own engine, so the large one's limit
// grows well past the small one's, and the model's limit is their sum; one
// limit for the model, split evenly, would give both the same. Neither
// engine is sent more than a replica's ceiling.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startEngineReplica, type EngineReplica } from "./helpers/engineReplicas";
import { createBatch } from "./helpers/batches";
import { configWriter } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS, pollUntil } from "./helpers/wait";

const MODEL = "engine-chat";
const cfg = configWriter("offpeak-replicas-adaptive-");
let small: EngineReplica;
let large: EngineReplica;
let t: TestServer;

beforeAll(async () => {
  small = await startEngineReplica({ maxRunning: 4, decodeMs: 150, prefillMsPerKChar: 0 }, { index: 0, models: [MODEL] });
  large = await startEngineReplica({ maxRunning: 32, decodeMs: 150, prefillMsPerKChar: 0 }, { index: 1, models: [MODEL] });
  const config = cfg.write("c.json", {
    upstreams: [{ name: "engines", models: [MODEL], max_concurrency: "auto", max_concurrency_limit: 48, replicas: [{ base_url: small.baseUrl }, { base_url: large.baseUrl }] }],
  });
  t = await startTestServer({ argv: ["--config", config] });
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
  await small?.stop();
  await large?.stop();
  cfg.cleanup();
});

interface ReplicaRow {
  base_url: string;
  concurrency_limit: number | null;
}

test("a batch over a small and a large engine: each replica's limit follows its own engine, the model's is their sum", async () => {
  const lines = Array.from({ length: 20_000 }, (_, i) =>
    JSON.stringify({ custom_id: `l${i}`, method: "POST", url: "/v1/chat/completions", body: { model: MODEL, messages: [{ role: "user", content: `line ${i}` }], max_tokens: 4 } }),
  );
  const { batch } = await createBatch(t.sdk(), lines);
  const limits = async () => {
    const rows = ((await (await t.api("/upstreams")).json()) as { data: { replicas: ReplicaRow[] }[] }).data[0]!.replicas;
    const of = (url: string) => rows.find((r) => r.base_url === url)!.concurrency_limit ?? 0;
    return { small: of(small.baseUrl), large: of(large.baseUrl) };
  };
  const found = await pollUntil(limits, (l) => l.large >= 16 && l.large >= 2 * l.small, { what: "the large engine's limit to grow past twice the small one's" });
  expect(found.small).toBeGreaterThanOrEqual(1);
  // The model's limit (its slots) is the replicas' sum.
  const metrics = await (await t.api("/metrics")).text();
  const modelLimit = Number(/^offpeak_model_concurrency_limit\{model="engine-chat"\} (\d+)/m.exec(metrics)?.[1]);
  const now = await limits();
  expect(Math.abs(modelLimit - (now.small + now.large))).toBeLessThanOrEqual(Math.max(4, (now.small + now.large) / 4));
  // Neither engine was sent more than its replica's ceiling (max_concurrency_limit, 48).
  expect(Math.max(small.stats().peakInFlight, large.stats().peakInFlight)).toBeLessThanOrEqual(48);
  await t.sdk().batches.cancel(batch.id);
}, SCENARIO_MS);

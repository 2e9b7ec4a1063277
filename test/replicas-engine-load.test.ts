// The engines' own load as a dispatch signal (docs/CONTRACT.md §21): an upstream
// with `engine: "vllm"` has each replica's /metrics read every 2 s; a
// replica busy with other clients' requests (another node's, or anyone's
// talking to the engine directly) is passed over by the bounded load, though
// offpeak itself has nothing in flight there. GET /upstreams shows the
// reading.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startEngineReplicas, type EngineReplicas } from "./helpers/engineReplicas";
import { configWriter } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS, pollUntil } from "./helpers/wait";

const MODEL = "engine-chat";
const cfg = configWriter("offpeak-engine-load-");
let set: EngineReplicas;
let t: TestServer;
const external: Promise<unknown>[] = [];

beforeAll(async () => {
  set = await startEngineReplicas(2, { maxRunning: 2, decodeMs: 20, prefillMsPerKChar: 200 }, { models: [MODEL] });
  const config = cfg.write("c.json", { upstreams: [{ name: "engines", engine: "vllm", models: [MODEL], max_concurrency: 32, replicas: set.baseUrls.map((base_url) => ({ base_url })) }] });
  t = await startTestServer({ argv: ["--config", config] });
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
  await set?.stop();
  await Promise.allSettled(external);
  cfg.cleanup();
});

test("a replica whose engine reports other clients' requests is passed over; /upstreams shows its engine_load", async () => {
  // Ten long requests (10 s of work each) straight to replica 0, not through offpeak: 2 running, 8 waiting.
  const long = "x".repeat(50_000);
  for (let i = 0; i < 10; i++)
    external.push(
      fetch(`${set.baseUrls[0]}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `${long} ${i}` }] }),
      }).then((r) => r.text()),
    );
  const upstream = await pollUntil(
    async () => ((await (await t.api("/upstreams")).json()) as any).data[0],
    (u: any) => u.replicas[0].engine_load >= 8,
    { what: "replica 0's engine load to be read" },
  );
  expect(upstream.replicas[0].in_flight).toBe(0);
  // Its KV cache, as the engine says (the engine model: running / its batch, 2 of 2).
  expect(upstream.replicas[0].engine_kv_cache).toBe(1);
  const before = set.replicas[0]!.stats().seen;
  // Short prompts of their own prefixes: rendezvous alone would send about half to replica 0.
  for (let k = 0; k < 16; k++) await t.sdk().chat.completions.create({ model: MODEL, messages: [{ role: "system", content: `prefix ${k} `.repeat(40) }, { role: "user", content: `q${k}` }] });
  expect(set.replicas[0]!.stats().seen - before).toBe(0);
  expect(set.replicas[1]!.stats().seen).toBeGreaterThanOrEqual(16);
}, SCENARIO_MS);

test("each engine's load metrics are summed over label sets; other metrics and comments are not", async () => {
  const { parseEngineLoad } = await import("../src/inference/replicas/engineLoad");
  const vllm = [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    'vllm:num_requests_running{model_name="a"} 3.0',
    'vllm:num_requests_running{model_name="b"} 1.0',
    'vllm:num_requests_waiting{model_name="a"} 7.0',
    'vllm:num_requests_waiting_by_reason{reason="x"} 100.0',
    'vllm:gpu_cache_usage_perc{model_name="a"} 0.5',
  ].join("\n");
  expect(parseEngineLoad("vllm", vllm)).toBe(11);
  expect(parseEngineLoad("sglang", "sglang:num_running_reqs 4\nsglang:num_queue_reqs 6\nsglang:token_usage 0.3\n")).toBe(10);
  expect(parseEngineLoad("llamacpp", "llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\n")).toBe(3);
  expect(parseEngineLoad("vllm", "something_else 4\n")).toBeNull();
  expect(parseEngineLoad("ollama", vllm)).toBeNull();
  const { parseKvCache } = await import("../src/inference/replicas/engineLoad");
  expect(parseKvCache("vllm", vllm)).toBe(0.5);
  expect(parseKvCache("vllm", 'vllm:kv_cache_usage_perc{model_name="a"} 0.25\nvllm:kv_cache_usage_perc{model_name="b"} 0.75\n')).toBe(0.75);
  expect(parseKvCache("sglang", "sglang:token_usage 0.3\n")).toBe(0.3);
  expect(parseKvCache("llamacpp", "llamacpp:requests_processing 1\n")).toBeNull();
});

test("between replicas with as many requests in flight, the one whose engine's KV cache is emptier is chosen; a stale reading is not used", async () => {
  const { newEngineTimes, newReplicaCells, setEngineLoad } = await import("../src/inference/replicas/cells");
  const { leastLoaded } = await import("../src/inference/replicas/pick");
  const cells = newReplicaCells();
  const times = newEngineTimes();
  const view = (idx: number) => ({ idx, id: `rep_${idx}`, baseUrl: `http://127.0.0.1:${9000 + idx}/v1`, weight: 1, limit: 0, seed: idx + 1, ownClient: false });
  const replicas = [view(0), view(1)];
  expect(leastLoaded(replicas, cells, times).idx).toBe(0);
  setEngineLoad(cells, times, 0, 0, 0.8);
  setEngineLoad(cells, times, 1, 0, 0.1);
  expect(leastLoaded(replicas, cells, times).idx).toBe(1);
  // Older than 5 s: unknown, the first listed again.
  setEngineLoad(cells, times, 1, 0, 0.1, Date.now() - 6000);
  setEngineLoad(cells, times, 0, 0, 0.8, Date.now() - 6000);
  expect(leastLoaded(replicas, cells, times).idx).toBe(0);
});

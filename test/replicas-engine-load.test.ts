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
});

// The engines' own word on their load (docs/CONTRACT.md §21): vLLM, SGLang and
// llama.cpp publish Prometheus metrics of the requests they run and hold
// waiting, every client's (other offpeak nodes' too). Read every
// ENGINE_EVERY_MS per replica and kept in the shared cells; a reading older
// than ENGINE_LOAD_MAX_AGE_MS counts as unknown (./cells.ts), and this
// process's own count of requests in flight always counts (./pick.ts).

/** How often each replica's /metrics is read. */
export const ENGINE_EVERY_MS = 2000;
const READ_TIMEOUT_MS = 1500;

export type Engine = "vllm" | "sglang" | "llamacpp" | "ollama" | "openai";

/** The metric names that add up to "running + waiting", per engine that publishes them. */
const LOAD_METRICS: Partial<Record<Engine, readonly string[]>> = {
  vllm: ["vllm:num_requests_running", "vllm:num_requests_waiting"],
  sglang: ["sglang:num_running_reqs", "sglang:num_queue_reqs"],
  llamacpp: ["llamacpp:requests_processing", "llamacpp:requests_deferred"],
};

/** The metric that says how full the engine's KV cache is (0–1), per engine that publishes it (vLLM's older name too). */
const KV_METRICS: Partial<Record<Engine, readonly string[]>> = {
  vllm: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
  sglang: ["sglang:token_usage"],
  llamacpp: ["llamacpp:kv_cache_usage_ratio"],
};

/** What an engine's /metrics said: requests running and waiting, and its KV cache's use (0–1; null when it does not say). */
export interface EngineReading {
  load: number;
  kvCache: number | null;
}

export const publishesLoad = (engine: string | undefined): engine is Engine => engine !== undefined && engine in LOAD_METRICS;

/** Where an engine serves /metrics: its base_url without the API's /v1. */
export const metricsUrlOf = (baseUrl: string): string => baseUrl.replace(/\/v1$/, "") + "/metrics";

/** The values of the metrics `names` in a Prometheus text, each label set's (one engine may serve several models). */
function valuesOf(text: string, names: readonly string[]): number[] {
  const out: number[] = [];
  for (const line of text.split("\n")) {
    if (line.length === 0 || line.charCodeAt(0) === 35) continue; // "#"
    for (const name of names) {
      if (!line.startsWith(name) || (line[name.length] !== "{" && line[name.length] !== " ")) continue;
      const value = Number(line.slice(line.lastIndexOf(" ") + 1));
      if (Number.isFinite(value)) out.push(value);
    }
  }
  return out;
}

/** The sum of the engine's load metrics in a Prometheus text (every label set), or null when none is there. */
export function parseEngineLoad(engine: Engine, text: string): number | null {
  const names = LOAD_METRICS[engine];
  if (!names) return null;
  const values = valuesOf(text, names);
  return values.length > 0 ? Math.round(values.reduce((a, b) => a + b, 0)) : null;
}

/** How full the engine's KV cache is (0–1: the fullest label set), or null when it does not say. */
export function parseKvCache(engine: Engine, text: string): number | null {
  const values = valuesOf(text, KV_METRICS[engine] ?? []);
  return values.length > 0 ? Math.min(1, Math.max(0, ...values)) : null;
}

/** Reads one engine's load: null when it does not answer in time, or says nothing we know. */
export async function readEngineLoad(engine: Engine, baseUrl: string, apiKey: string | null): Promise<EngineReading | null> {
  try {
    const res = await fetch(metricsUrlOf(baseUrl), { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(READ_TIMEOUT_MS) });
    if (!res.ok) return null;
    const text = await res.text();
    const load = parseEngineLoad(engine, text);
    return load === null ? null : { load, kvCache: parseKvCache(engine, text) };
  } catch {
    return null;
  }
}

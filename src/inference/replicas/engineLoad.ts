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

export const publishesLoad = (engine: string | undefined): engine is Engine => engine !== undefined && engine in LOAD_METRICS;

/** Where an engine serves /metrics: its base_url without the API's /v1. */
export const metricsUrlOf = (baseUrl: string): string => baseUrl.replace(/\/v1$/, "") + "/metrics";

/**
 * The sum of the engine's load metrics in a Prometheus text (every label
 * set: one engine may serve several models), or null when none is there.
 */
export function parseEngineLoad(engine: Engine, text: string): number | null {
  const names = LOAD_METRICS[engine];
  if (!names) return null;
  let sum = 0;
  let found = false;
  for (const line of text.split("\n")) {
    if (line.length === 0 || line.charCodeAt(0) === 35) continue; // "#"
    for (const name of names) {
      if (!line.startsWith(name) || (line[name.length] !== "{" && line[name.length] !== " ")) continue;
      const value = Number(line.slice(line.lastIndexOf(" ") + 1));
      if (Number.isFinite(value)) {
        sum += value;
        found = true;
      }
    }
  }
  return found ? Math.round(sum) : null;
}

/** Reads one engine's load: null when it does not answer in time, or says nothing we know. */
export async function readEngineLoad(engine: Engine, baseUrl: string, apiKey: string | null): Promise<number | null> {
  try {
    const res = await fetch(metricsUrlOf(baseUrl), { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(READ_TIMEOUT_MS) });
    if (!res.ok) return null;
    return parseEngineLoad(engine, await res.text());
  } catch {
    return null;
  }
}

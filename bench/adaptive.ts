// Adaptive concurrency (docs/CONTRACT.md §18, max_concurrency "auto") against an engine
// model (test/helpers/engineModel.ts): an engine whose throughput peaks at
// KNEE requests in flight, stays flat to CLIFF, falls past it (its "KV
// cache" overflows) and answers 503 from 4 × KNEE.
//
// In one run: a sweep of fixed max_concurrency values, then "auto", each on
// a fresh offpeak server (a child process) running the same batch against
// the same engine (in this process). For each: the batch's throughput over
// SECONDS (the engine's answers, less the interactive ones; counted from 1 s
// after the first answer), the median latency of interactive requests sent
// meanwhile at 4/s, the share of the time the engine had more than CLIFF in
// flight, and offpeak's peak RSS. Ratios are to the best fixed value; the
// interactive latency is compared with the engine's unloaded latency,
// measured straight at the engine in the same run. For "auto" it prints the
// controller's trace: its limit, latency and floor read from /metrics every
// 250 ms, beside the engine's in-flight count.
//
// Usage: bun bench/adaptive.ts [seconds=12] [unloaded-ms=100] [knee=24] [cliff=48] [fixed=8,16,24,32,48,64,96]
// Run it alone: flock /tmp/offpeak-bench.lock bun bench/adaptive.ts
import { loadAverage, machineNote, median, percentile } from "./lib";
import { auth, startBenchServer, uploadBatchFile } from "./server";
import { startEngineModel, throughputAt, type EngineShape } from "../test/helpers/engineModel";

const seconds = Number(process.argv[2] ?? 12);
const unloadedMs = Number(process.argv[3] ?? 100);
const knee = Number(process.argv[4] ?? 24);
const cliff = Number(process.argv[5] ?? 48);
const fixed = (process.argv[6] ?? "8,16,24,32,48,64,96").split(",").map(Number);
const shape: EngineShape = { unloadedMs, knee, cliff, failAt: 4 * knee, slope: 0.1, fall: 1 };
const MODEL = "engine-chat";
const INTERACTIVE_EVERY_MS = 250;
const SKIP_MS = 1000;

const engine = await startEngineModel(shape, { models: [MODEL] });

let peak = 0;
let peakAt = 0;
for (let n = 1; n <= 4 * knee; n++)
  if (throughputAt(shape, n) > peak) {
    peak = throughputAt(shape, n);
    peakAt = n;
  }

// Lines of ≈2 KB: a 4 MB shard holds ≈2000, so two Workers run two shards
// (up to 128 lines in flight) through the whole measurement; enough of them
// that the batch outlasts it at the engine's peak.
const LINES = Math.max(5000, Math.ceil((seconds + 4) * peak * 1.3));
const input = `/tmp/offpeak-adaptive-${process.pid}.jsonl`;
{
  const pad = "x".repeat(1900);
  const w = Bun.file(input).writer();
  for (let i = 0; i < LINES; i++)
    w.write(JSON.stringify({ custom_id: `a-${i}`, method: "POST", url: "/v1/chat/completions", body: { model: MODEL, messages: [{ role: "user", content: `q${i} ${pad}` }], max_tokens: 16 } }) + "\n");
  await w.end();
}

const chat = (content: string) => JSON.stringify({ model: MODEL, messages: [{ role: "user", content }], max_tokens: 16 });

/** The engine's latency alone: sequential requests straight to it. */
async function unloaded(url: string, headers: Record<string, string> = {}): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < 12; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: chat("alone") });
    await res.arrayBuffer();
    if (i >= 2) xs.push(performance.now() - t0);
  }
  return median(xs);
}

interface TracePoint {
  t: number;
  limit: number;
  latencyMs: number;
  floorMs: number;
  engineInFlight: number;
}

interface Result {
  name: string;
  rate: number;
  interactiveP50: number;
  interactiveP90: number;
  interactiveN: number;
  interactiveFailed: number;
  pastCliff: number;
  maxInFlight: number;
  rejected: number;
  rssMb: number;
  trace: TracePoint[];
}

function gauge(text: string, name: string): number {
  const m = new RegExp(`^${name}\\{model="${MODEL}"\\} (\\S+)$`, "m").exec(text);
  return m ? Number(m[1]) : NaN;
}

async function run(name: string, maxConcurrency: number | null): Promise<Result> {
  const upstream: Record<string, unknown> = { name: "engine", base_url: engine.baseUrl, models: [MODEL], queue_size: 1024 };
  if (maxConcurrency !== null) upstream.max_concurrency = maxConcurrency;
  const server = await startBenchServer({ OFFPEAK_BATCH_WORKERS: "2" }, { upstreams: [upstream] });
  try {
    const file = await uploadBatchFile(server.base, input);
    engine.reset();
    const created = (await fetch(`${server.base}/batches`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    }).then((r) => r.json())) as { id: string };
    const trace: TracePoint[] = [];
    const t0 = performance.now();
    // The controller's trace, from /metrics (what an operator would see).
    let tracing = true;
    const tracer = (async () => {
      while (tracing) {
        const text = await fetch(`${server.base}/metrics`, { headers: auth }).then((r) => r.text());
        trace.push({
          t: (performance.now() - t0) / 1000,
          limit: gauge(text, "offpeak_model_concurrency_limit"),
          latencyMs: gauge(text, "offpeak_model_latency_seconds") * 1000,
          floorMs: gauge(text, "offpeak_model_latency_floor_seconds") * 1000,
          engineInFlight: engine.stats().inFlight,
        });
        await Bun.sleep(250);
      }
    })();
    while (engine.stats().answered === 0) await Bun.sleep(20);
    await Bun.sleep(SKIP_MS);
    const from = engine.stats();
    const tFrom = performance.now();
    // Interactive requests at a steady pace while the batch runs.
    const latencies: number[] = [];
    let failed = 0;
    const pending: Promise<void>[] = [];
    for (let next = tFrom; next < tFrom + seconds * 1000; next += INTERACTIVE_EVERY_MS) {
      await Bun.sleep(Math.max(0, next - performance.now()));
      pending.push(
        (async () => {
          const s = performance.now();
          const res = await fetch(`${server.base}/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: chat("interactive") });
          await res.arrayBuffer();
          if (res.status === 200) latencies.push(performance.now() - s);
          else failed++;
        })(),
      );
    }
    const to = engine.stats();
    const elapsed = (performance.now() - tFrom) / 1000;
    await Promise.all(pending);
    tracing = false;
    await tracer;
    const status = ((await fetch(`${server.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json())) as { status: string }).status;
    if (status !== "in_progress") console.log(`  (${name}: the batch was ${status} before the end of the measurement: its rate is too low)`);
    await fetch(`${server.base}/batches/${created.id}/cancel`, { method: "POST", headers: auth });
    latencies.sort((a, b) => a - b);
    return {
      name,
      // The interactive requests the engine answered in the window are not the batch's.
      rate: (to.answered - from.answered - latencies.length) / elapsed,
      interactiveP50: percentile(latencies, 50),
      interactiveP90: percentile(latencies, 90),
      interactiveN: latencies.length,
      interactiveFailed: failed,
      pastCliff: (to.pastCliffMs - from.pastCliffMs) / (elapsed * 1000),
      maxInFlight: to.maxInFlight,
      rejected: to.rejected,
      rssMb: server.peakRssMb(),
      trace: trace.filter((p) => p.t * 1000 <= tFrom - t0 + elapsed * 1000),
    };
  } finally {
    await server.stop();
  }
}

try {
  const alone = await unloaded(engine.baseUrl);
  console.log(`machine: ${machineNote()}; load ${loadAverage()}`);
  console.log(
    `engine model: ${unloadedMs} ms alone (measured ${alone.toFixed(1)} ms), knee ${knee}, cliff ${cliff}, 503 from ${shape.failAt}; peak ${peak.toFixed(0)} req/s (from ${peakAt} in flight)`,
  );
  console.log(`each run: a batch of ${LINES} lines; ${seconds} s measured from 1 s after the first answer; interactive requests every ${INTERACTIVE_EVERY_MS} ms meanwhile\n`);
  const results: Result[] = [];
  for (const c of fixed) results.push(await run(String(c), c));
  results.push(await run("auto", null));
  const best = results.filter((r) => r.name !== "auto").reduce((a, b) => (b.rate > a.rate ? b : a));
  const row = (r: Result) =>
    `${r.name.padStart(5)}  ${r.rate.toFixed(1).padStart(7)}/s  ${(r.rate / best.rate).toFixed(3)}×  interactive p50 ${r.interactiveP50.toFixed(0).padStart(4)} ms (${(r.interactiveP50 / alone).toFixed(2)}× alone) p90 ${r.interactiveP90.toFixed(0).padStart(4)} ms  n=${r.interactiveN}${r.interactiveFailed ? ` failed=${r.interactiveFailed}` : ""}  past cliff ${(r.pastCliff * 100).toFixed(1).padStart(5)}%  max in flight ${String(r.maxInFlight).padStart(3)}  503s ${r.rejected}  RSS ${r.rssMb.toFixed(0)} MB`;
  console.log("max_concurrency  batch rate  ratio to best fixed");
  for (const r of results) console.log(row(r));
  const auto = results.at(-1)!;
  console.log(`\nbest fixed: ${best.name} (${best.rate.toFixed(1)}/s)`);
  console.log(
    `auto: ${(auto.rate / best.rate).toFixed(3)}× the best fixed (target ≥ 0.9); interactive p50 ${(auto.interactiveP50 / alone).toFixed(2)}× the engine alone (target ≤ 1.5); past the cliff ${(auto.pastCliff * 100).toFixed(1)}% of the time (target ≤ 20%)`,
  );
  console.log("\nauto's trace (t s: limit, latency/floor ms as /metrics shows them, engine in flight):");
  let line: string[] = [];
  for (const p of auto.trace) {
    line.push(`${p.t.toFixed(1)}:${p.limit} ${Number.isFinite(p.latencyMs) ? p.latencyMs.toFixed(0) : "-"}/${Number.isFinite(p.floorMs) ? p.floorMs.toFixed(0) : "-"} [${p.engineInFlight}]`);
    if (line.length === 6) {
      console.log("  " + line.join("   "));
      line = [];
    }
  }
  if (line.length) console.log("  " + line.join("   "));
} finally {
  await engine.stop();
  await Bun.file(input)
    .delete()
    .catch(() => {});
}

// Off-peak priority: while a batch saturates an upstream model,
// interactive latency on that model may rise by at most 20% at the median.
//
// A loopback upstream (test/helpers/engineReplicas.ts, its own process)
// answers every completion after a fixed latency (a stand-in for a model
// that takes time); offpeak gives the model
// max_concurrency slots. Phase 1 measures interactive latency with the model
// otherwise idle (the baseline, same run); phase 2 starts a batch with far
// more lines than slots, waits until it holds every free slot, and measures
// the same interactive load again while the batch runs.
//
// Usage: bun bench/priority.ts [seconds-per-phase=8] [upstream-latency-ms=20]
import { engineArgs } from "./lib";
import { auth, freePort, startBenchServer, uploadBatchFile, percentile } from "./server";

const seconds = Number(process.argv[2] ?? 8);
const latencyMs = Number(process.argv[3] ?? 20);
const SLOTS = 8;
/** Interactive clients, each sending one request after another: half the slots. */
const CLIENTS = SLOTS / 2;
const BATCH_LINES = 200_000;

const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, ...engineArgs({ ports: [upPort], latencyMs })], { stdout: "ignore", stderr: "inherit" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
let server: Awaited<ReturnType<typeof startBenchServer>> | null = null;

async function interactive(base: string, ms: number): Promise<number[]> {
  const latencies: number[] = [];
  const until = performance.now() + ms;
  const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "an interactive question" }], max_tokens: 16 });
  let errors = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        const res = await fetch(`${base}/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body });
        await res.arrayBuffer();
        if (res.status === 200) latencies.push(performance.now() - t0);
        else errors++;
      }
    }),
  );
  if (errors) console.log(`  (${errors} interactive requests failed)`);
  return latencies.sort((a, b) => a - b);
}

try {
  for (let i = 0; i < 100; i++) {
    try {
      await fetch(`${upBase}/models`);
      break;
    } catch {}
    await Bun.sleep(50);
  }
  server = await startBenchServer({}, { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: SLOTS, queue_size: 256 }] });
  const input = `/tmp/offpeak-priority-${BATCH_LINES}.jsonl`;
  {
    const w = Bun.file(input).writer();
    for (let i = 0; i < BATCH_LINES; i++)
      w.write(JSON.stringify({ custom_id: `p-${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "fake-model", messages: [{ role: "user", content: `batch question ${i}` }], max_tokens: 16 } }) + "\n");
    await w.end();
  }
  const file = await uploadBatchFile(server.base, input);

  await interactive(server.base, 1000); // warm-up
  const alone = await interactive(server.base, seconds * 1000);

  const created = (await fetch(`${server.base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  }).then((r) => r.json())) as { id: string };
  // Wait until the batch runs at full speed (it holds every slot the interactive clients leave).
  const getBatch = () => fetch(`${server!.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json()) as Promise<{ status: string; request_counts: { completed: number } }>;
  for (let i = 0; i < 200; i++) {
    const b = await getBatch();
    if (b.status === "in_progress" && b.request_counts.completed > SLOTS * 10) break;
    await Bun.sleep(100);
  }
  const before = (await getBatch()).request_counts.completed;
  const t0 = performance.now();
  const busy = await interactive(server.base, seconds * 1000);
  const b = await getBatch();
  const batchRate = (b.request_counts.completed - before) / ((performance.now() - t0) / 1000);
  const stillRunning = b.status === "in_progress";
  await fetch(`${server.base}/batches/${created.id}/cancel`, { method: "POST", headers: auth });

  const p50a = percentile(alone, 50);
  const p50b = percentile(busy, 50);
  const capacity = (SLOTS * 1000) / latencyMs;
  console.log(`upstream: ${latencyMs} ms per request, ${SLOTS} slots (≈${Math.round(capacity)} req/s); ${CLIENTS} interactive clients`);
  console.log(`idle model   : ${alone.length} requests  p50 ${p50a.toFixed(2)} ms  p99 ${percentile(alone, 99).toFixed(2)} ms`);
  console.log(`batch running: ${busy.length} requests  p50 ${p50b.toFixed(2)} ms  p99 ${percentile(busy, 99).toFixed(2)} ms; batch meanwhile ${Math.round(batchRate)} lines/s${stillRunning ? "" : " (batch ended early!)"}`);
  console.log(`p50 rise     : ${((p50b / p50a - 1) * 100).toFixed(1)}% (target ≤ 20%)`);
  console.log(`peak RSS     : ${server.peakRssMb().toFixed(0)} MB`);
} finally {
  await server?.stop();
  upstream.kill();
}

// 1M-line chat batch on offpeak-echo, create → completed, against the raw
// streaming floor (bench/floor-echo.ts) measured in the same run. Also
// samples GET /batches/{id} latency while the batch runs, and the server's
// peak RSS. Usage: bun bench/batch-echo.ts [lines=1000000]
import { runFloor } from "./floor-echo";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { auth, percentile, startBenchServer, uploadBatchFile } from "./server";

const lines = Number(process.argv[2] ?? 1_000_000);
const input = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
await generateBatchFile(input, lines); // reuses the file when it is already there

const floor = await runFloor(input, "/tmp/offpeak-floor-out.jsonl");
console.log(`floor   : ${floor.lines} lines in ${floor.seconds.toFixed(2)} s`);

const server = await startBenchServer();
try {
  const file = await uploadBatchFile(server.base, input);
  const t0 = performance.now();
  const created = await fetch(`${server.base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  }).then((r) => r.json() as Promise<{ id: string }>);
  const latencies: number[] = [];
  let batch: { status: string; request_counts: { total: number; completed: number; failed: number }; output_file_id: string | null };
  for (;;) {
    const s = performance.now();
    batch = (await fetch(`${server.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json())) as typeof batch;
    latencies.push(performance.now() - s);
    if (["completed", "failed", "expired", "cancelled"].includes(batch.status)) break;
    await Bun.sleep(20);
  }
  const seconds = (performance.now() - t0) / 1000;
  latencies.sort((a, b) => a - b);
  // Exactness: every custom_id once in the output.
  const out = await fetch(`${server.base}/files/${batch.output_file_id}/content`, { headers: auth }).then((r) => r.text());
  const ids = new Set<string>();
  let outLines = 0;
  for (const line of out.split("\n")) {
    if (!line) continue;
    outLines++;
    ids.add(JSON.parse(line).custom_id);
  }
  console.log(`offpeak : ${batch.request_counts.completed}/${batch.request_counts.total} completed in ${seconds.toFixed(2)} s (status ${batch.status})`);
  console.log(`ratio   : ${(seconds / floor.seconds).toFixed(2)}× the floor (target ≤ 4×)`);
  console.log(`GET /batches/{id} while running: n=${latencies.length} p50=${percentile(latencies, 50).toFixed(1)} ms p99=${percentile(latencies, 99).toFixed(1)} ms (target p99 ≤ 25 ms)`);
  console.log(`peak RSS: ${server.peakRssMb().toFixed(0)} MB (target ≤ 256 MB)`);
  console.log(`output  : ${outLines} lines, ${ids.size} distinct custom_ids`);
  if (batch.status !== "completed" || ids.size !== lines || outLines !== lines) process.exitCode = 1;
} finally {
  await server.stop();
}

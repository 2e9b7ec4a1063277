// A chat batch against a zero-latency loopback OpenAI-compatible upstream
// (test/helpers/engineReplicas.ts at a fixed latency of 0, its own process),
// in lines per second, beside a baseline: the same requests sent straight
// to the upstream by this script at the same concurrency.
// Usage: bun bench/batch-upstream.ts [lines=200000]
import { writeFileSync } from "node:fs";
import { engineArgs } from "./lib";
import { auth, freePort, startBenchServer, uploadBatchFile } from "./server";

const lines = Number(process.argv[2] ?? 200_000);
const CONCURRENCY = 128;
const input = `/tmp/offpeak-upstream-${lines}.jsonl`;
{
  const w = Bun.file(input).writer();
  for (let i = 0; i < lines; i++)
    w.write(JSON.stringify({ custom_id: `u-${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "fake-model", messages: [{ role: "user", content: `question ${i}` }], max_tokens: 16 } }) + "\n");
  await w.end();
}

const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, ...engineArgs({ ports: [upPort] })], { stdout: "ignore", stderr: "inherit" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
for (let i = 0; i < 100; i++) {
  try {
    if ((await fetch(`${upBase}/models`)).ok) break;
  } catch {}
  await Bun.sleep(50);
}

// Baseline: the same number of requests, straight to the upstream, CONCURRENCY at a time.
const baseN = Math.min(lines, 100_000);
let next = 0;
const b0 = performance.now();
await Promise.all(
  Array.from({ length: CONCURRENCY }, async () => {
    while (next < baseN) {
      const i = next++;
      const res = await fetch(`${upBase}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: `question ${i}` }], max_tokens: 16 }),
      });
      await res.text();
    }
  }),
);
const baseRate = baseN / ((performance.now() - b0) / 1000);
console.log(`direct  : ${baseN} requests at concurrency ${CONCURRENCY}: ${Math.round(baseRate)} req/s`);

const server = await startBenchServer({}, { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: CONCURRENCY }] });
try {
  const file = await uploadBatchFile(server.base, input);
  const t0 = performance.now();
  const created = (await fetch(`${server.base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  }).then((r) => r.json())) as { id: string };
  let batch: { status: string; request_counts: { completed: number; failed: number; total: number } };
  for (;;) {
    batch = (await fetch(`${server.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json())) as typeof batch;
    if (["completed", "failed", "expired", "cancelled"].includes(batch.status)) break;
    await Bun.sleep(50);
  }
  const seconds = (performance.now() - t0) / 1000;
  const rate = lines / seconds;
  console.log(`offpeak : ${batch.request_counts.completed}/${batch.request_counts.total} completed (${batch.request_counts.failed} failed) in ${seconds.toFixed(2)} s: ${Math.round(rate)} lines/s (target ≥ 20000)`);
  console.log(`ratio   : ${(rate / baseRate).toFixed(2)}× the direct rate`);
  console.log(`peak RSS: ${server.peakRssMb().toFixed(0)} MB`);
  if (batch.status !== "completed" || batch.request_counts.completed !== lines) process.exitCode = 1;
} finally {
  await server.stop();
  upstream.kill();
  writeFileSync(input, "");
}

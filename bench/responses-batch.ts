// A 1M-line /v1/responses batch on offpeak-echo beside the same requests as
// a /v1/chat/completions batch (bench/gen-batch.ts: same seed, same texts;
// the system prompt becomes `instructions`, max_tokens `max_output_tokens`),
// on one server in the same run, create → completed, rounds alternating
// which goes first. A Responses answer is a bigger object (≈2× the JSON of
// a chat.completion) and takes three ids, so this is what the endpoint
// module's per-line work costs. Target: responses ≤ 1.2× chat.
// Each batch starts after a `sync` (the previous one's output written back).
// Wall time on this shared 2-core machine swings by 2× between runs of the
// same batch, so each batch also reports the server's CPU time (utime +
// stime of all its threads, Workers included, from /proc).
// Usage: bun bench/responses-batch.ts [lines=1000000] [rounds=2]
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { median as med, settleDisk, cpuSeconds } from "./lib";
import { auth, startBenchServer, uploadBatchFile } from "./server";

const lines = Number(process.argv[2] ?? 1_000_000);
const rounds = Number(process.argv[3] ?? 2);
const chatPath = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
const respPath = `bench/data/batch-responses-${lines}.jsonl`;
await generateBatchFile(chatPath, lines);
await generateBatchFile(respPath, lines, { kind: "responses" });

const server = await startBenchServer();

async function runBatch(fileId: string, endpoint: string): Promise<{ seconds: number; cpu: number; outBytes: number; usage: { input_tokens: number; output_tokens: number } }> {
  // The previous batch's output (up to 1.1 GB) is still being written back: let it finish first.
  settleDisk();
  const cpu0 = cpuSeconds(server.pid);
  const t0 = performance.now();
  const created = (await fetch(`${server.base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: fileId, endpoint, completion_window: "24h" }),
  }).then((r) => r.json())) as { id: string };
  let b: { status: string; request_counts: { completed: number }; output_file_id: string; usage: { input_tokens: number; output_tokens: number } };
  for (;;) {
    b = (await fetch(`${server.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json())) as typeof b;
    if (["completed", "failed", "expired", "cancelled"].includes(b.status)) break;
    await Bun.sleep(20);
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(server.pid) - cpu0;
  if (b.status !== "completed" || b.request_counts.completed !== lines) throw new Error(`${endpoint} batch ended ${b.status} with ${b.request_counts.completed} completed`);
  const out = await fetch(`${server.base}/files/${b.output_file_id}`, { headers: auth }).then((r) => r.json() as Promise<{ bytes: number }>);
  return { seconds, cpu, outBytes: out.bytes, usage: b.usage };
}

try {
  const chatFile = await uploadBatchFile(server.base, chatPath);
  const respFile = await uploadBatchFile(server.base, respPath);
  const chat: number[] = [];
  const resp: number[] = [];
  const cpu = { chat: [] as number[], responses: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? (["chat", "responses"] as const) : (["responses", "chat"] as const);
    for (const which of order) {
      const res = which === "chat" ? await runBatch(chatFile.id, "/v1/chat/completions") : await runBatch(respFile.id, "/v1/responses");
      (which === "chat" ? chat : resp).push(res.seconds);
      cpu[which].push(res.cpu);
      console.log(
        `  round ${r + 1} ${which.padEnd(9)}: ${lines} lines in ${res.seconds.toFixed(2)} s (server CPU ${res.cpu.toFixed(2)} s), output ${(res.outBytes / 1e6).toFixed(0)} MB, usage ${res.usage.input_tokens} in / ${res.usage.output_tokens} out`,
      );
    }
  }
  const ratios = chat.map((c, i) => resp[i]! / c);
  console.log(`chat      : median ${med(chat).toFixed(2)} s (${chat.map((s) => s.toFixed(2)).join(", ")})`);
  console.log(`responses : median ${med(resp).toFixed(2)} s (${resp.map((s) => s.toFixed(2)).join(", ")})`);
  console.log(`ratio     : responses / chat per round ${ratios.map((x) => x.toFixed(2)).join(", ")}; median ${med(ratios).toFixed(2)}×, of the medians ${(med(resp) / med(chat)).toFixed(2)}× (target ≤ 1.2×)`);
  console.log(
    `server CPU: chat median ${med(cpu.chat).toFixed(2)} s, responses ${med(cpu.responses).toFixed(2)} s = ${(med(cpu.responses) / med(cpu.chat)).toFixed(2)}× (per round ${cpu.responses.map((c, i) => (c / cpu.chat[i]!).toFixed(2)).join(", ")})`,
  );
  console.log(`peak RSS  : ${server.peakRssMb().toFixed(0)} MB`);
} finally {
  await server.stop();
}

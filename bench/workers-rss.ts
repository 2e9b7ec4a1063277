// Memory and speed per batch Worker count (docs/CONTRACT.md §20): for each count N, a
// fresh child-process server with OFFPEAK_BATCH_WORKERS=N (request log and
// fsync on, as by default)
//   1. RSS with N idle Workers: half a second after the server answers (the
//      runner makes its pool of N Workers at its first tick, before any
//      batch), so the growth from one count to the next is the idle
//      Workers' own,
//   2. RSS after a 2-line batch has run and the server has been quiet for a
//      second (the upload's two validation Workers are there too),
//   3. the 1M-line echo batch (bench/gen-batch.ts): upload, then
//      POST /batches → completed, timed, with the server's peak RSS (VmHWM,
//      all threads, from /proc) over the whole run and over the batch alone
//      (VmHWM reset to the current RSS just before create, by writing 5 to
//      /proc/PID/clear_refs; "n/a" where the kernel refuses), and the largest
//      VmRSS sampled every 100 ms during the batch.
// Every count is checked: completed = total = the file's lines, none failed.
// Counts rotate from round to round (the machine is shared: medians are the
// figures to read); the table at the end gives medians and, per count, the
// peak's growth over the count before it, per added Worker.
//
// Usage: bun bench/workers-rss.ts [--workers 1,2,4,8,16] [--lines N] [--rounds R]
//          [--server-root DIR] [--env K=V,K=V] [--label TEXT] [--log-dir DIR]
//   --server-root runs the server from another checkout (e.g. `git worktree add
//   /tmp/base HEAD` with node_modules linked) for a before/after.
//   --env adds environment variables to every server (e.g. MIMALLOC_PURGE_DELAY=0).
//   --log-dir keeps each server's log there (workers-N-round-R.log).
// Run benchmarks one at a time: flock /tmp/offpeak-bench.lock bun bench/workers-rss.ts
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { freePort, loadAverage, machineNote, median, peakRssMb, ROOT, rssMb, settleDisk, spawnBun, waitForHttp, benchArgs, resetPeakRss } from "./lib";

const KEY = "sk-op-bench-admin-key-000000000000000000000";
const auth = { authorization: `Bearer ${KEY}` };
const argv = process.argv.slice(2);
const { opt } = benchArgs(argv);
const counts = (opt("workers") ?? "1,2,4,8,16").split(",").map(Number);
if (counts.some((n) => !Number.isInteger(n) || n < 1 || n > 64)) throw new Error("--workers: counts from 1 to 64, comma-separated");
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const rounds = Number(opt("rounds") ?? 1);
const serverRoot = opt("server-root") ?? ROOT;
const extraEnv = Object.fromEntries((opt("env") ?? "").split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
const logDir = opt("log-dir");
if (logDir) mkdirSync(logDir, { recursive: true });
const label = opt("label") ?? (serverRoot === ROOT ? "this tree" : serverRoot);
const input = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;

console.log(`machine : ${machineNote()}; load ${loadAverage()}`);
const gen = await generateBatchFile(input, lines);
console.log(`input   : ${input}, ${lines} lines, ${(gen.bytes / 1e6).toFixed(1)} MB; server: ${label}${Object.keys(extraEnv).length ? `; env ${JSON.stringify(extraEnv)}` : ""}`);
const tinyDir = mkdtempSync(join(tmpdir(), "offpeak-wrss-"));
const tiny = join(tinyDir, "tiny.jsonl");
writeFileSync(
  tiny,
  [1, 2].map((i) => JSON.stringify({ custom_id: `t-${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] } }) + "\n").join(""),
);

interface Run {
  workers: number;
  startMb: number;
  idleMb: number;
  uploadPeakMb: number;
  seconds: number;
  peakMb: number;
  batchPeakMb: number;
  sampledMb: number;
}

const resetPeak = resetPeakRss;

async function upload(base: string, path: string): Promise<string> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(path), "input.jsonl");
  const res = await fetch(`${base}/files`, { method: "POST", headers: auth, body: form });
  if (!res.ok) throw new Error(`upload: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

interface Batch {
  id: string;
  status: string;
  request_counts: { total: number; completed: number; failed: number };
}

async function runBatch(base: string, fileId: string, pollMs: number): Promise<Batch> {
  const res = await fetch(`${base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  });
  if (!res.ok) throw new Error(`create: ${res.status} ${await res.text()}`);
  const { id } = (await res.json()) as { id: string };
  for (;;) {
    const b = (await (await fetch(`${base}/batches/${id}`, { headers: auth })).json()) as Batch;
    if (["completed", "failed", "expired", "cancelled"].includes(b.status)) return b;
    await Bun.sleep(pollMs);
  }
}

async function one(workers: number, round: number): Promise<Run> {
  settleDisk();
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-wrss-data-"));
  const port = freePort();
  // The server's log (request lines included, as by default) goes to a file in its data dir.
  const server = spawnBun(["src/main.ts", "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir], {
    cwd: serverRoot,
    env: { OFFPEAK_ADMIN_KEY: KEY, OFFPEAK_BATCH_WORKERS: String(workers), ...extraEnv },
    stderr: join(dataDir, "server.log"),
  });
  const base = `http://127.0.0.1:${port}/api/v1`;
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, server.proc, 30_000);
    server.assertRuns("src/main.ts");
    const pid = server.pid;
    await Bun.sleep(500);
    const startMb = rssMb(pid);

    // After a 2-line batch: one or two Workers have worked.
    const t = await runBatch(base, await upload(base, tiny), 50);
    if (t.status !== "completed" || t.request_counts.completed !== 2) throw new Error(`tiny batch: ${JSON.stringify(t)}`);
    await Bun.sleep(1000);
    const idleMb = rssMb(pid);

    const fileId = await upload(base, input);
    const uploadPeakMb = peakRssMb(pid);
    await Bun.sleep(300);
    const reset = resetPeak(pid);

    let sampledMb = 0;
    const sampler = setInterval(() => (sampledMb = Math.max(sampledMb, rssMb(pid))), 100);
    const t0 = performance.now();
    const b = await runBatch(base, fileId, 100);
    const seconds = (performance.now() - t0) / 1000;
    clearInterval(sampler);
    const peakAfter = peakRssMb(pid);
    if (b.status !== "completed" || b.request_counts.completed !== lines || b.request_counts.total !== lines || b.request_counts.failed !== 0)
      throw new Error(`batch: ${JSON.stringify(b)}`);
    return {
      workers,
      startMb,
      idleMb,
      uploadPeakMb,
      seconds,
      peakMb: Math.max(uploadPeakMb, peakAfter),
      batchPeakMb: reset ? peakAfter : NaN,
      sampledMb,
    };
  } finally {
    await server.stop();
    if (logDir) copyFileSync(join(dataDir, "server.log"), join(logDir, `workers-${workers}-round-${round}.log`));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const f0 = (x: number) => (Number.isNaN(x) ? "n/a" : x.toFixed(0));
const runs: Run[] = [];
for (let r = 0; r < rounds; r++) {
  // Rotate the order: no count always runs first (or last) in a round.
  const order = counts.map((_, i) => counts[(i + r) % counts.length]!);
  if (r % 2 === 1) order.reverse();
  for (const n of order) {
    const x = await one(n, r + 1);
    runs.push(x);
    console.log(
      `round ${r + 1} workers ${String(n).padStart(2)}: create → completed ${x.seconds.toFixed(2)} s; peak RSS ${f0(x.peakMb)} MB (batch alone ${f0(x.batchPeakMb)}, sampled ${f0(x.sampledMb)}, upload ${f0(x.uploadPeakMb)}); RSS with ${n} idle Workers ${f0(x.startMb)}, after a 2-line batch ${f0(x.idleMb)} MB; load ${loadAverage()}`,
    );
  }
}
rmSync(tinyDir, { recursive: true, force: true });

console.log(`\nmedians over ${rounds} round(s), ${label}:`);
console.log("workers | create→completed | peak RSS | batch-alone peak | +MB/Worker (peak) | RSS, Workers idle | +MB/Worker (idle)");
let prev: { n: number; peak: number; idle: number } | null = null;
for (const n of counts) {
  const mine = runs.filter((x) => x.workers === n);
  const peak = median(mine.map((x) => x.peakMb));
  const idle = median(mine.map((x) => x.startMb));
  const per = (a: number, b: number) => (prev ? ((a - b) / (n - prev.n)).toFixed(1) : "–");
  console.log(
    `${String(n).padStart(7)} | ${median(mine.map((x) => x.seconds)).toFixed(2).padStart(14)} s | ${f0(peak).padStart(5)} MB | ${f0(median(mine.map((x) => x.batchPeakMb))).padStart(13)} MB | ${per(peak, prev?.peak ?? 0).padStart(17)} | ${f0(idle).padStart(13)} MB | ${per(idle, prev?.idle ?? 0).padStart(17)}`,
  );
  prev = { n, peak, idle };
}

// Where each batch Worker's memory goes, without the server around it: N
// batch Workers (src/batches/worker/entry.ts, with the probe of
// bench/worker-probe.ts beside it, created with the pool's own options)
// validate and then run every shard of the 1M-line echo batch
// (bench/gen-batch.ts), a task at a time each, as the runner hands them
// out; the part files go to a temporary directory. Each count runs in a
// fresh child process, which reports
//   - its RSS before any Worker, with N idle Workers, and its peak RSS
//     (VmHWM, reset once the Workers are up) while validating and running,
//   - each Worker's largest JavaScriptCore heap while it worked (its own
//     process.memoryUsage()): the GC heap (heapUsed), the "extra" memory the
//     GC was told of (strings' and ArrayBuffers' storage, included in
//     heapUsed), heapTotal, and its ArrayBuffer bytes; the median over the
//     Workers is printed,
//   - the modules a Worker loaded, the full collections the Workers made
//     themselves (src/batches/worker/garbage.ts), their waits for a turn at
//     the CPU (src/batches/worker/turns.ts), and the run's time.
// No database, no HTTP, no request log: the growth per Worker here is the
// Workers' own.
//
// Usage: bun bench/worker-memory.ts [--workers 1,2,4,8,16] [--lines N] [--rounds R]
//          [--options JSON] [--env K=V,K=V] [--turns T]
//   --options replaces the pool's Worker options (e.g. '{}' for none, '{"smol":true}').
//   --turns: turns at the CPU (src/batches/turns.ts), as the pool sets them
//   unless given: min(N, the default Worker count for this machine's cores).
//   `--turns 16 --workers 8` on 2 cores shows what 8 Workers that all hold a
//   turn (a machine with 8 cores or more) hold.
//   --env adds environment variables to the children (e.g. MIMALLOC_PURGE_DELAY=0;
//   without it they get MIMALLOC_PURGE_DELAY as `offpeak serve` sets it).
// Run benchmarks one at a time: flock /tmp/offpeak-bench.lock bun bench/worker-memory.ts
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PURGE_DELAY_MS } from "../src/allocator";
import { BATCH_WORKER_OPTIONS } from "../src/batches/pool";
import { workerThreadSettings } from "../src/config";
import { newTurnHolder, newTurns } from "../src/batches/turns";
import { defaultBatchWorkers, usableCores } from "../src/defaults";
import { shardBoundaries } from "../src/batches/shards";
import type { FromWorker, PricedModel, RunTask, ToWorker, ValidateTask } from "../src/batches/types";
import { CELLS, SHARED_MODELS } from "../src/inference/admission/slotCells";
import { newHealthMemory } from "../src/inference/upstream/health";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { loadAverage, machineNote, median, ROOT, benchArgs } from "./lib";

const argv = process.argv.slice(2);
const { opt } = benchArgs(argv);
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const input = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
const options = (opt("options") ? JSON.parse(opt("options")!) : BATCH_WORKER_OPTIONS) as WorkerOptions;

const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? NaN) * 1024;
const MB = 1e6;

interface Probe {
  max: { heap: number; extra: number; capacity: number; arrayBuffers: number };
  now: { heap: number; extra: number; capacity: number };
  modules: number;
  collections: { collections: number; ms: number };
  waits: { count: number; ms: number; wakeups: number; heldMs: number };
}

interface ChildReport {
  workers: number;
  beforeMb: number;
  idleMb: number;
  validatePeakMb: number;
  runPeakMb: number;
  validateSeconds: number;
  runSeconds: number;
  probes: Probe[];
}

if (opt("child")) {
  // ── one count, in this process ─────────────────────────────────────────
  const n = Number(opt("child"));
  const abs = join(ROOT, input);
  const size = Bun.file(abs).size;
  const shards = await shardBoundaries(Bun.file(abs), size);
  const outDir = mkdtempSync(join(tmpdir(), "offpeak-wmem-"));
  const model: PricedModel = {
    id: "offpeak-echo",
    kind: "echo",
    baseUrl: null,
    apiKey: null,
    upstreamModel: null,
    timeoutMs: 600_000,
    latencyMs: 0,
    tokensPerSecond: 0,
    upstreamIdx: -1,
    upstream: null,
    batchPriority: null,
    inputPerMillion: 0,
    outputPerMillion: 0,
    limited: false,
    sharedBase: -1,
  };
  const slots = new Int32Array(new SharedArrayBuffer(4 * CELLS * SHARED_MODELS));
  const health = newHealthMemory();
  Bun.gc(true);
  const beforeMb = kb("VmRSS") / MB;
  const turns = newTurns(Math.min(n, Number(opt("turns") ?? defaultBatchWorkers(usableCores()))));
  const workers = Array.from({ length: n }, () => new Worker(new URL("./worker-probe.ts", import.meta.url), options));
  for (const w of workers)
    w.postMessage({ type: "init", models: [model], slots, held: new Int32Array(new SharedArrayBuffer(4 * SHARED_MODELS)), health, turns, turn: newTurnHolder(), thread: workerThreadSettings(), replicas: null } satisfies ToWorker);
  // Up and idle: every Worker has answered a probe.
  const probeAll = () =>
    Promise.all(
      workers.map(
        (w) =>
          new Promise<Probe>((resolve) => {
            const on = (e: MessageEvent) => {
              if (e.data?.type !== "probe") return;
              w.removeEventListener("message", on);
              resolve(e.data as Probe);
            };
            w.addEventListener("message", on);
            w.postMessage({ type: "probe" });
          }),
      ),
    );
  await probeAll();
  await Bun.sleep(500);
  const idleMb = kb("VmRSS") / MB;

  /** Hands `tasks` out, one at a time per Worker; resolves when all are answered. */
  const runAll = (tasks: (ValidateTask | RunTask)[]) =>
    new Promise<void>((resolve, reject) => {
      let next = 0;
      let left = tasks.length;
      const give = (w: Worker) => {
        if (next < tasks.length) w.postMessage(tasks[next++]! satisfies ToWorker);
      };
      for (const w of workers) {
        w.onmessage = (e: MessageEvent<FromWorker>) => {
          const m = e.data;
          if (m.type === "failed") reject(new Error(m.error));
          if (m.type !== "validated" && m.type !== "done") return;
          if (--left === 0) resolve();
          else give(w);
        };
        w.onerror = (e) => reject(new Error(e.message));
        give(w);
      }
    });
  const base = { batchId: "batch_bench", input: { path: abs }, endpoint: "/v1/chat/completions" };
  writeFileSync("/proc/self/clear_refs", "5");
  let t0 = performance.now();
  await runAll(shards.map((s, idx) => ({ ...base, ...s, idx, type: "validate", models: ["offpeak-echo"] })));
  const validateSeconds = (performance.now() - t0) / 1000;
  const validatePeakMb = kb("VmHWM") / MB;
  writeFileSync("/proc/self/clear_refs", "5");
  t0 = performance.now();
  await runAll(
    shards.map((s, idx) => ({
      ...base,
      ...s,
      idx,
      type: "run",
      outPath: join(outDir, `out-${idx}.jsonl`),
      errPath: join(outDir, `err-${idx}.jsonl`),
      partTargets: null,
      claim: 1,
      stopCode: null,
      deadline: Date.now() + 86_400_000,
      maxAttempts: 10,
      retryBaseMs: 500,
      concurrency: 64,
    })),
  );
  const runSeconds = (performance.now() - t0) / 1000;
  const runPeakMb = kb("VmHWM") / MB;
  const probes = await probeAll();
  rmSync(outDir, { recursive: true, force: true });
  console.log(JSON.stringify({ workers: n, beforeMb, idleMb, validatePeakMb, runPeakMb, validateSeconds, runSeconds, probes } satisfies ChildReport));
  process.exit(0);
}

// ── the parent: one child per count and round ─────────────────────────────
const counts = (opt("workers") ?? "1,2,4,8,16").split(",").map(Number);
const rounds = Number(opt("rounds") ?? 1);
const extraEnv = Object.fromEntries((opt("env") ?? "").split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
console.log(`machine : ${machineNote()}; load ${loadAverage()}`);
await generateBatchFile(input, lines);
console.log(`input   : ${input}, ${lines} lines; Worker options ${JSON.stringify(options)}; turns ${opt("turns") ?? `min(N, ${defaultBatchWorkers(usableCores())})`}${Object.keys(extraEnv).length ? `; env ${JSON.stringify(extraEnv)}` : ""}`);
const reports: ChildReport[] = [];
const f1 = (x: number) => x.toFixed(1);
for (let r = 0; r < rounds; r++) {
  const order = counts.map((_, i) => counts[(i + r) % counts.length]!);
  if (r % 2 === 1) order.reverse();
  for (const n of order) {
    const args = [process.execPath, import.meta.path, "--child", String(n), "--lines", String(lines)];
    if (opt("options")) args.push("--options", opt("options")!);
    if (opt("turns")) args.push("--turns", opt("turns")!);
    const child = Bun.spawnSync(args, { cwd: ROOT, env: { ...process.env, MIMALLOC_PURGE_DELAY: String(PURGE_DELAY_MS), ...extraEnv }, stderr: "inherit" });
    if (child.exitCode !== 0) throw new Error(`child for ${n} Workers exited with ${child.exitCode}`);
    const rep = JSON.parse(child.stdout.toString().trim().split("\n").pop()!) as ChildReport;
    reports.push(rep);
    const med = (k: keyof Probe["max"]) => f1(median(rep.probes.map((p) => p.max[k])) / MB);
    console.log(
      `round ${r + 1} workers ${String(n).padStart(2)}: run ${f1(rep.runSeconds)} s, peak ${rep.runPeakMb.toFixed(0)} MB; validate ${f1(rep.validateSeconds)} s, peak ${rep.validatePeakMb.toFixed(0)} MB; RSS before ${rep.beforeMb.toFixed(0)}, idle ${rep.idleMb.toFixed(0)} MB; per Worker (median of largest): heap ${med("heap")} (extra ${med("extra")}), heapTotal ${med("capacity")}, ArrayBuffers ${med("arrayBuffers")} MB; modules ${rep.probes[0]?.modules}; own full collections ${rep.probes.reduce((a, p) => a + p.collections.collections, 0)} (${f1(rep.probes.reduce((a, p) => a + p.collections.ms, 0) / 1000)} s); turn waits ${rep.probes.reduce((a, p) => a + p.waits.count, 0)} (${rep.probes.reduce((a, p) => a + p.waits.wakeups, 0)} wake-ups, ${f1(rep.probes.reduce((a, p) => a + p.waits.ms, 0) / 1000)} s in all; turns held ${f1(rep.probes.reduce((a, p) => a + p.waits.heldMs, 0) / 1000)} s in all); load ${loadAverage()}`,
    );
  }
}
console.log(`\nmedians over ${rounds} round(s):`);
console.log("workers | run s | run peak MB | +MB/Worker | validate peak MB | idle MB | +MB/idle Worker | heap/Worker MB | heapTotal/Worker MB");
let prev: { n: number; peak: number; idle: number } | null = null;
for (const n of counts) {
  const mine = reports.filter((x) => x.workers === n);
  const peak = median(mine.map((x) => x.runPeakMb));
  const idle = median(mine.map((x) => x.idleMb - x.beforeMb));
  const per = (a: number, b: number) => (prev ? f1((a - b) / (n - prev.n)) : "–");
  const heap = median(mine.flatMap((x) => x.probes.map((p) => p.max.heap))) / MB;
  const cap = median(mine.flatMap((x) => x.probes.map((p) => p.max.capacity))) / MB;
  console.log(
    `${String(n).padStart(7)} | ${f1(median(mine.map((x) => x.runSeconds))).padStart(5)} | ${peak.toFixed(0).padStart(11)} | ${per(peak, prev?.peak ?? 0).padStart(10)} | ${median(mine.map((x) => x.validatePeakMb)).toFixed(0).padStart(16)} | ${idle.toFixed(0).padStart(7)} | ${per(idle, prev?.idle ?? 0).padStart(15)} | ${f1(heap).padStart(14)} | ${f1(cap).padStart(18)}`,
  );
  prev = { n, peak, idle };
}

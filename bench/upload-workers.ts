// Upload throughput by the number of validation Workers (docs/CONTRACT.md §20: "upload
// and validation use the cores they are given"): a generated batch file
// uploaded with curl as multipart (purpose=batch, every line validated) to
// one offpeak server per Worker count (OFFPEAK_UPLOAD_VALIDATION_WORKERS),
// rounds rotating, beside
//   - the same tree with purpose=user_data (no validation: what receiving
//     and storing the bytes costs, the ceiling for validated uploads), and
//   - (--bare) a bare Bun.serve that streams the body to disk
//     (bench/baseline-upload-server.ts: the disk and the client).
// Per upload: MB/s, the server's CPU per MB on its HTTP (main) thread, on
// its Worker threads (validation; idle batch Workers too, ≈0) and in all;
// the HTTP thread's busy share (its CPU over the wall time), and the CPU
// per MB of the busiest single Worker thread. Peak RSS per server (VmHWM).
// Medians over the rounds, with the range.
//
// Reading it on a machine with few cores: curl, the HTTP thread and the
// Workers share them, so MB/s stops growing where the cores run out. What
// more cores would give is estimated from the per-thread figures: with a
// core for each thread, the busiest thread (the HTTP thread, or the busiest
// Worker) sets the pace, ≈1000 / its ms/MB MB/s (printed as "with a core per
// thread"; contention on few cores inflates every thread's ms/MB, so it
// errs low). Measure on the many-core machine itself to know.
//
// Usage: bun bench/upload-workers.ts [--lines N] [--rounds N] [--workers 1,2,4]
//          [--tree DIR] [--no-user-data] [--bare] [--client curl|fetch] [VARIANT...]
//   (--client: curl by default where it is installed, else fetch)
//   VARIANT = name=ROOT[,ENV=VALUE...][,purpose=user_data]: more servers
//   (e.g. an older tree: old=/tmp/old), measured in the same rounds.
// e.g. bun bench/upload-workers.ts --workers 1,2 --rounds 5
//      bun bench/upload-workers.ts --lines 10000000 --workers 1,2,4,8,16 --rounds 3 --bare
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { cachedBatchFile, DEFAULT_LINES } from "./gen-batch";
import { MB, ROOT, cpuSeconds, freePort, loadAverage, machineNote, median, peakRssMb, settleDisk, spawnBun, threadCpuSeconds, waitForHttp, which, type Child } from "./lib";

const ADMIN_KEY = "sk-op-benchUploadWorkersAdminKey0000000000000";
const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? undefined : argv.splice(i, 2)[1];
};
const flag = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  if (i !== -1) argv.splice(i, 1);
  return i !== -1;
};
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const rounds = Number(opt("rounds") ?? 3);
const tree = resolve(opt("tree") ?? ROOT);
const workerCounts = (opt("workers") ?? "1,2").split(",").filter(Boolean).map(Number);
// curl where there is one (it costs the machine little CPU), else Bun's fetch streaming a FormData.
const client = opt("client") ?? (which("curl") ? "curl" : "fetch");
if (client !== "curl" && client !== "fetch") throw new Error("--client must be curl or fetch");
const withUserData = !flag("no-user-data");
const bare = flag("bare");
const { file, bytes } = await cachedBatchFile(lines);

interface Server {
  name: string;
  child: Child;
  url: string;
  purpose: "batch" | "user_data";
  bare: boolean;
  dataDir: string;
  mbps: number[];
  /** CPU ms per MB: main thread, Worker threads, all threads. */
  main: number[];
  workers: number[];
  all: number[];
  /** Main thread CPU over wall time. */
  busy: number[];
  /** CPU ms/MB of the busiest Worker thread (a scanner, or the finder). */
  topWorker: number[];
}

interface Cpu {
  main: number;
  workers: number;
  all: number;
  /** Each Worker thread's, by thread id. */
  byWorker: Map<string, number>;
}

/** CPU seconds (user + system) of `pid` so far: its main thread, its threads named "Worker" (together and each), and all. */
function cpu(pid: number): Cpu {
  let workers = 0;
  const byWorker = new Map<string, number>();
  // A thread that ended meanwhile is not listed: its time is in the process's total.
  for (const [tid, t] of threadCpuSeconds(pid))
    if (t.name === "Worker") {
      workers += t.seconds;
      byWorker.set(tid, t.seconds);
    }
  return { main: cpuSeconds(pid, { thread: true }), workers, all: cpuSeconds(pid), byWorker };
}

/** The most CPU one Worker thread used between two readings. */
function busiestWorker(c0: Cpu, c1: Cpu): number {
  let most = 0;
  for (const [tid, s] of c1.byWorker) most = Math.max(most, s - (c0.byWorker.get(tid) ?? 0));
  return most;
}

const servers: Server[] = [];
async function start(name: string, root: string, env: Record<string, string>, purpose: "batch" | "user_data", isBare = false): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-uw-"));
  const port = freePort();
  const child = isBare
    ? spawnBun(["bench/baseline-upload-server.ts", "--port", String(port), "--dir", dataDir])
    : spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], { env: { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn", ...env }, cwd: root });
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
  const url = isBare ? `http://127.0.0.1:${port}/upload` : `http://127.0.0.1:${port}/api/v1/files`;
  servers.push({ name, child, url, purpose, bare: isBare, dataDir, mbps: [], main: [], workers: [], all: [], busy: [], topWorker: [] });
}

async function upload(s: Server): Promise<number> {
  const t0 = performance.now();
  let out: string;
  if (client === "curl") {
    const p = Bun.spawn(["curl", "-sS", "-H", "Expect:", "-H", `authorization: Bearer ${ADMIN_KEY}`, "-F", `purpose=${s.purpose}`, "-F", `file=@${file};type=application/jsonl`, s.url], { stdout: "pipe" });
    out = await new Response(p.stdout).text();
    await p.exited;
  } else {
    const form = new FormData();
    form.set("purpose", s.purpose);
    form.set("file", Bun.file(file), "batch.jsonl");
    out = await (await fetch(s.url, { method: "POST", headers: { authorization: `Bearer ${ADMIN_KEY}` }, body: form })).text();
  }
  const seconds = (performance.now() - t0) / 1000;
  if (s.bare) {
    for (const f of readdirSync(s.dataDir)) rmSync(join(s.dataDir, f), { force: true });
    return seconds;
  }
  const rec = JSON.parse(out) as { id: string; status: string; bytes: number };
  if (rec.status !== "processed" || rec.bytes !== bytes) throw new Error(`${s.name}: ${out.slice(0, 300)}`);
  await fetch(`${s.url}/${rec.id}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } });
  return seconds;
}

try {
  for (const w of workerCounts) await start(`${w} Worker${w === 1 ? "" : "s"}`, tree, { OFFPEAK_UPLOAD_VALIDATION_WORKERS: String(w) }, "batch");
  for (const spec of argv) {
    const [name, rest] = spec.split("=", 2) as [string, string];
    const [root, ...envs] = rest.split(",");
    const env: Record<string, string> = {};
    let purpose: "batch" | "user_data" = "batch";
    for (const e of envs) {
      const at = e.indexOf("=");
      if (e.slice(0, at) === "purpose") purpose = e.slice(at + 1) as "batch" | "user_data";
      else env[e.slice(0, at)] = e.slice(at + 1);
    }
    await start(name, resolve(root!), env, purpose);
  }
  if (withUserData) await start("user_data", tree, {}, "user_data");
  if (bare) await start("bare Bun.serve", ROOT, {}, "batch", true);
  console.log(`upload-workers: ${lines} lines, ${(bytes / MB).toFixed(1)} MB, ${client}; ${rounds} rounds; ${machineNote()}; load ${loadAverage().toFixed(2)}`);
  settleDisk();
  for (const s of servers) await upload(s); // warm-up (JIT, Workers)
  for (let round = 0; round < rounds; round++) {
    const row: string[] = [];
    for (let k = 0; k < servers.length; k++) {
      const s = servers[(round + k) % servers.length]!;
      const c0 = cpu(s.child.pid);
      const seconds = await upload(s);
      const c1 = cpu(s.child.pid);
      const mb = bytes / MB;
      s.mbps.push(mb / seconds);
      s.main.push(((c1.main - c0.main) * 1000) / mb);
      s.workers.push(((c1.workers - c0.workers) * 1000) / mb);
      s.all.push(((c1.all - c0.all) * 1000) / mb);
      s.busy.push((c1.main - c0.main) / seconds);
      s.topWorker.push((busiestWorker(c0, c1) * 1000) / mb);
      row.push(`${s.name} ${(mb / seconds).toFixed(1)}`);
      await Bun.sleep(300);
    }
    console.log(`  round ${round + 1}: ${row.join(", ")} MB/s; load ${loadAverage().toFixed(2)}`);
  }
  const range = (xs: number[], d = 1) => `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
  console.log("medians (range):");
  for (const s of servers) {
    // With a core for each thread, the busiest one sets the pace: the HTTP thread or one Worker.
    const ceiling = 1000 / Math.max(median(s.main), median(s.topWorker));
    console.log(
      `${s.name.padEnd(16)} ${range(s.mbps)} MB/s; CPU ms/MB: HTTP thread ${range(s.main, 2)}, Workers ${range(s.workers, 2)} (busiest one ${range(s.topWorker, 2)}), all ${range(s.all, 2)}; ` +
        `HTTP thread busy ${range(s.busy, 2)}; with a core per thread ≈${ceiling.toFixed(0)} MB/s; peak RSS ${peakRssMb(s.child.pid).toFixed(0)} MB`,
    );
  }
} finally {
  for (const s of servers) {
    await s.child.stop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}

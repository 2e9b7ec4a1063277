// A/B of batch uploads between offpeak builds or settings: one server per
// variant (a source tree, e.g. a `git worktree` of the previous commit in
// /tmp, and environment variables), the same file uploaded with curl to each
// in turn, the order rotated every round; medians and each variant's ratio
// to the first. Also the server's CPU time per upload (all its threads,
// from /proc/PID/stat), which another load on the machine moves less than
// the wall time. Peak RSS per server (VmHWM).
//
// Usage: bun bench/ab/upload-ab.ts [--lines N] [--rounds N] VARIANT...
//   VARIANT = name=ROOT[,ENV=VALUE...], e.g.
//   bun bench/ab/upload-ab.ts base=/tmp/offpeak-base new=. new-2mb=.,OFFPEAK_DUPLICATE_CHECK_BYTES=2097152
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { cachedBatchFile, DEFAULT_LINES } from "../gen-batch";
import { MB, freePort, loadAverage, machineNote, median, peakRssMb, settleDisk, spawnBun, waitForHttp, type Child, cpuSeconds } from "../lib";

const ADMIN_KEY = "sk-op-benchUploadAbAdminKey000000000000000000";
const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? undefined : argv.splice(i, 2)[1];
};
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const rounds = Number(opt("rounds") ?? 5);
const { file, bytes } = await cachedBatchFile(lines);

interface Server {
  name: string;
  child: Child;
  base: string;
  dataDir: string;
  mbps: number[];
  cpu: number[];
}

const servers: Server[] = [];
try {
  for (const spec of argv) {
    const [name, rest] = spec.split("=", 2) as [string, string];
    const [root, ...envs] = rest.split(",");
    const env: Record<string, string> = { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn" };
    for (const e of envs) {
      const at = e.indexOf("=");
      env[e.slice(0, at)] = e.slice(at + 1);
    }
    const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-ab-"));
    const port = freePort();
    const child = spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], { env, cwd: resolve(root!) });
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    servers.push({ name, child, base: `http://127.0.0.1:${port}/api/v1`, dataDir, mbps: [], cpu: [] });
  }
  console.log(`upload-ab: ${lines} lines, ${(bytes / MB).toFixed(1)} MB; ${rounds} rounds; ${machineNote()}; load ${loadAverage().toFixed(2)}`);
  settleDisk();
  const upload = async (s: Server) => {
    const p = Bun.spawn(
      ["curl", "-sS", "-H", "Expect:", "-H", `authorization: Bearer ${ADMIN_KEY}`, "-w", "\n%{time_total}", "-F", "purpose=batch", "-F", `file=@${file};type=application/jsonl`, `${s.base}/files`],
      { stdout: "pipe" },
    );
    const out = await new Response(p.stdout).text();
    await p.exited;
    const at = out.lastIndexOf("\n");
    const rec = JSON.parse(out.slice(0, at)) as { id: string; status: string; bytes: number };
    if (rec.status !== "processed" || rec.bytes !== bytes) throw new Error(`${s.name}: ${out.slice(0, 300)}`);
    await fetch(`${s.base}/files/${rec.id}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    return bytes / MB / Number(out.slice(at + 1));
  };
  for (const s of servers) await upload(s); // warm-up (JIT, Workers)
  for (let round = 0; round < rounds; round++) {
    const row: string[] = [];
    for (let k = 0; k < servers.length; k++) {
      const s = servers[(round + k) % servers.length]!;
      const cpu0 = cpuSeconds(s.child.pid);
      const mbps = await upload(s);
      const cpu = cpuSeconds(s.child.pid) - cpu0;
      s.mbps.push(mbps);
      s.cpu.push(cpu);
      row.push(`${s.name} ${mbps.toFixed(1)} (${cpu.toFixed(2)} CPU-s)`);
      await Bun.sleep(300);
    }
    console.log(`  round ${round + 1}: ${row.join(", ")} MB/s; load ${loadAverage().toFixed(2)}`);
  }
  const first = median(servers[0]!.mbps);
  for (const s of servers)
    console.log(
      `${s.name.padEnd(12)} median ${median(s.mbps).toFixed(1)} MB/s (${(median(s.mbps) / first).toFixed(3)}× ${servers[0]!.name}), range ${Math.min(...s.mbps).toFixed(1)}–${Math.max(...s.mbps).toFixed(1)}; server CPU per upload median ${median(s.cpu).toFixed(2)} s (${(median(s.cpu) / median(servers[0]!.cpu)).toFixed(3)}×); peak RSS ${peakRssMb(s.child.pid).toFixed(0)} MB`,
    );
} finally {
  for (const s of servers) {
    await s.child.stop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}

// Small helpers shared by the benchmarks: child processes whose peak RSS we
// can read from /proc, free ports, waiting for a server, timing and stats.
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** The repository root (bench/..). */
export const ROOT = join(import.meta.dir, "..");

/** MB = 10^6 bytes throughout the benchmarks (so 284.5 MB is 284,500,000 bytes). */
export const MB = 1e6;

function statusField(pid: number, field: "VmHWM" | "VmRSS"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
  return (Number(m[1]) * 1024) / MB;
}

/** Peak resident set size (VmHWM) of a live process, in MB (10^6 bytes). Covers all its threads (Workers included). */
export const peakRssMb = (pid: number): number => statusField(pid, "VmHWM");
/** Current resident set size (VmRSS), in MB. */
export const rssMb = (pid: number): number => statusField(pid, "VmRSS");

/**
 * CPU times in seconds from a /proc stat file (`/proc/PID/stat` for the
 * process, all threads; `/proc/PID/task/TID/stat` for one thread): user,
 * system, and its waited-for children's. Clock ticks are USER_HZ, 100 a
 * second on Linux.
 */
export function statTimes(path: string): { name: string; user: number; sys: number; childUser: number; childSys: number } {
  const stat = readFileSync(path, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // f[0] is field 3 (state): utime is field 14 → f[11], stime f[12], cutime f[13], cstime f[14].
  return { name: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), user: Number(f[11]) / 100, sys: Number(f[12]) / 100, childUser: Number(f[13]) / 100, childSys: Number(f[14]) / 100 };
}

/** CPU seconds (user + system) a live process has used so far, all its threads; `thread`: its main thread's alone. */
export function cpuSeconds(pid: number, thread = false): number {
  const t = statTimes(thread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`);
  return t.user + t.sys;
}

/** The command line of a live process, for checking that a pid is the process we meant (no wrapper, no exec surprise). */
export function cmdlineOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): number {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = s.port!;
  s.stop(true);
  return port;
}

/** Polls `url` until it answers 2xx, the child exits, or `timeoutMs` passes. */
export async function waitForHttp(url: string, child?: { exitCode: number | null }, timeoutMs = 15_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (child && child.exitCode !== null) throw new Error(`process exited (code ${child.exitCode}) before ${url} answered`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {}
    if (performance.now() > deadline) throw new Error(`${url} did not answer within ${timeoutMs} ms`);
    await Bun.sleep(50);
  }
}

export interface Child {
  proc: Bun.Subprocess;
  pid: number;
  /** Peak RSS so far, MB. */
  peakRssMb(): number;
  /** Throws unless the pid now runs `bun <script>` (call once it is up: right after spawn the exec may not have happened yet). */
  assertRuns(script: string): void;
  stop(): Promise<number>;
}

/** Children still running: killed if the benchmark exits early (a throw, Ctrl-C). */
const live = new Set<Bun.Subprocess>();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => process.exit(130));
}

/**
 * Starts `bun <args>` as a child with the running bun binary (process.execPath,
 * the real executable, not a shell shim), so the returned pid is the process
 * that serves; assertRuns() checks /proc/pid/cmdline to be sure.
 */
export function spawnBun(args: string[], opts: { env?: Record<string, string>; cwd?: string; /** A file for the child's stderr (default: inherited). */ stderr?: string } = {}): Child {
  const proc = Bun.spawn([process.execPath, ...args], {
    cwd: opts.cwd ?? ROOT,
    env: { ...process.env, ...opts.env },
    stdin: "ignore",
    stdout: "ignore",
    stderr: opts.stderr ? Bun.file(opts.stderr) : "inherit",
  });
  const pid = proc.pid;
  live.add(proc);
  void proc.exited.then(() => live.delete(proc));
  return {
    proc,
    pid,
    peakRssMb: () => peakRssMb(pid),
    assertRuns(script) {
      const cmd = cmdlineOf(pid);
      // Otherwise the RSS figure would be some other process's (a shell wrapper, say).
      if (!cmd.includes(script)) throw new Error(`pid ${pid} runs '${cmd.join(" ")}', not bun ${script}`);
    },
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      return proc.exited;
    },
  };
}

/** Seconds taken by `fn`. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; seconds: number }> {
  const t0 = performance.now();
  const value = await fn();
  return { value, seconds: (performance.now() - t0) / 1000 };
}

export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Is `cmd` on PATH? */
export function which(cmd: string): string | null {
  return Bun.which(cmd);
}

/** Machine note for benchmark output: cores, CPU model, kernel, Bun version. */
export function machineNote(): string {
  let cpu = "unknown CPU";
  try {
    cpu = /model name\s*:\s*(.+)/.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.trim() ?? cpu;
  } catch {}
  const cores = navigator.hardwareConcurrency;
  return `${cores} cores (${cpu}), Linux ${process.platform === "linux" ? readFileSync("/proc/sys/kernel/osrelease", "utf8").trim() : process.platform}, Bun ${Bun.version}`;
}

/** 1-minute load average (Linux), to flag a busy machine. */
export function loadAverage(): number {
  try {
    return Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
  } catch {
    return NaN;
  }
}

/** Dirty page-cache bytes waiting for writeback (Linux), in MB. */
export function dirtyMb(): number {
  try {
    const m = /Dirty:\s+(\d+) kB/.exec(readFileSync("/proc/meminfo", "utf8"));
    return m ? (Number(m[1]) * 1024) / MB : NaN;
  } catch {
    return NaN;
  }
}

/**
 * Flushes dirty pages (sync) so that writeback of earlier runs' files does
 * not slow this run's page-cache writes; returns the dirty MB before.
 */
export function settleDisk(): number {
  const before = dirtyMb();
  if (which("sync")) Bun.spawnSync(["sync"]);
  return before;
}

/**
 * A benchmark's `--name value` options and `--name` flags (every benchmark
 * reads its command line this way; each prints its own usage).
 */
export function benchArgs(argv: string[] = process.argv.slice(2)): { opt: (name: string) => string | undefined; flag: (name: string) => boolean } {
  return {
    opt: (name) => {
      const i = argv.indexOf(`--${name}`);
      return i >= 0 ? argv[i + 1] : undefined;
    },
    flag: (name) => argv.includes(`--${name}`),
  };
}

// The one helper library of the benchmarks: child processes, and what /proc
// says of them (peak RSS and RSS in MB = 10^6 bytes, CPU time: one reader
// each, so every bench's figures are in the same units, as BENCHMARKS.md
// states them), free ports, waiting for a server, timing and stats.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The repository root (bench/..). */
export const ROOT = join(import.meta.dir, "..");

/** MB = 10^6 bytes throughout the benchmarks (so 284.5 MB is 284,500,000 bytes). */
export const MB = 1e6;

/** What /proc/PID/status says of a live process's memory and threads: RSS (VmRSS) and peak RSS (VmHWM) in MB, all its threads (Workers included). */
export function procStatus(pid: number): { rssMb: number; peakRssMb: number; threads: number } {
  const s = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(s);
    if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
    return (Number(m[1]) * 1024) / MB;
  };
  return { rssMb: kb("VmRSS"), peakRssMb: kb("VmHWM"), threads: Number(/Threads:\s+(\d+)/.exec(s)?.[1] ?? NaN) };
}

/** Peak resident set size (VmHWM) of a live process, in MB (10^6 bytes). Covers all its threads (Workers included). */
export const peakRssMb = (pid: number): number => procStatus(pid).peakRssMb;
/** Current resident set size (VmRSS), in MB. */
export const rssMb = (pid: number): number => procStatus(pid).rssMb;

/**
 * Resets a process's peak RSS (VmHWM) to its current RSS, so that a later
 * peakRssMb() is the peak of what came after (Linux ≥ 4.0, the process's
 * owner); false where the kernel refuses.
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

/** Clock ticks a second in /proc's times (USER_HZ: 100 on Linux whatever the kernel's own tick). */
const USER_HZ = 100;

/**
 * CPU times in seconds from a /proc stat file (`/proc/PID/stat` for the
 * process, all threads; `/proc/PID/task/TID/stat` for one thread): user,
 * system, and its waited-for children's; with its name and parent's pid.
 * The one reader of CPU time for every benchmark.
 */
export function statTimes(path: string): { name: string; ppid: number; user: number; sys: number; childUser: number; childSys: number } {
  const stat = readFileSync(path, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // f[0] is field 3 (state), f[1] the parent's pid: utime is field 14 → f[11], stime f[12], cutime f[13], cstime f[14].
  return {
    name: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
    ppid: Number(f[1]),
    user: Number(f[11]) / USER_HZ,
    sys: Number(f[12]) / USER_HZ,
    childUser: Number(f[13]) / USER_HZ,
    childSys: Number(f[14]) / USER_HZ,
  };
}

export interface CpuOptions {
  /** The main thread's alone (its task has the process's id). */
  thread?: boolean;
  /** User or system (kernel) time alone; both by default. */
  only?: "user" | "sys";
  /** With the CPU of its children that it has waited for (a postmaster's finished backends). */
  children?: boolean;
}

/** CPU seconds (user + system) a live process has used so far, all its threads; `true` or `{ thread: true }`: its main thread's alone. */
export function cpuSeconds(pid: number, opts: boolean | CpuOptions = {}): number {
  const o = typeof opts === "boolean" ? { thread: opts } : opts;
  const t = statTimes(o.thread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`);
  const user = t.user + (o.children ? t.childUser : 0);
  const sys = t.sys + (o.children ? t.childSys : 0);
  return o.only === "user" ? user : o.only === "sys" ? sys : user + sys;
}

/** CPU seconds of each of a live process's threads so far, by thread id, with the thread's name ("Worker" for a Worker). */
export function threadCpuSeconds(pid: number): Map<string, { name: string; seconds: number }> {
  const out = new Map<string, { name: string; seconds: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const t = statTimes(`/proc/${pid}/task/${tid}/stat`);
      out.set(tid, { name: t.name, seconds: t.user + t.sys });
    } catch {} // a thread that ended meanwhile (its time stays in the process's total)
  }
  return out;
}

/** The pids of every process now running on the machine. */
export const allPids = (): number[] => readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number);

/** The command line of a live process, for checking that a pid is the process we meant (no wrapper, no exec surprise). */
export function cmdlineOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
}

/** A TCP port that was free a moment ago on 127.0.0.1 (the tests' own). */
export { freePort } from "../test/helpers/env";

/** Any answer at all: the server listens (for waitForHttp). */
export const anyAnswer = () => true;

/** Polls `url` until it answers 2xx (or as `accept` likes), the child exits, or `timeoutMs` passes: the benchmarks' one wait for a server. */
export async function waitForHttp(url: string, child?: { exitCode: number | null }, timeoutMs = 15_000, accept: (res: Response) => boolean = (res) => res.ok): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (child && child.exitCode !== null) throw new Error(`process exited (code ${child.exitCode}) before ${url} answered`);
    try {
      if (accept(await fetch(url))) return;
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

/** The benchmarks' loopback engine: the tests' engine model (test/helpers/engineReplicas.ts), run as a process of its own by test/helpers/engineCli.ts. */
export const ENGINE_SCRIPT = join(ROOT, "test", "helpers", "engineCli.ts");

/**
 * `bun` arguments that start the engine (ENGINE_SCRIPT) in a process of its
 * own, so that its CPU is not the benchmark's: one replica a port, serving
 * "fake-model" after a fixed latency (default 0 ms: at once), as an
 * OpenAI-compatible upstream; with `controlPort`, a port that kills,
 * restarts, resets and reads it (see the end of ENGINE_SCRIPT).
 */
export function engineArgs(o: { ports: number[]; latencyMs?: number; models?: string[]; controlPort?: number; countContents?: boolean; arrivals?: boolean }): string[] {
  return [
    ENGINE_SCRIPT,
    "--ports",
    o.ports.join(","),
    "--models",
    (o.models ?? ["fake-model"]).join(","),
    "--latency-ms",
    String(o.latencyMs ?? 0),
    ...(o.controlPort !== undefined ? ["--control-port", String(o.controlPort)] : []),
    ...(o.countContents ? ["--count-contents"] : []),
    ...(o.arrivals ? ["--arrivals"] : []),
  ];
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

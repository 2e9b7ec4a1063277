// `npm test`: the whole suite three ways, in parallel processes, each with
// its own output in a log file; prints each one's summary (and the whole log
// of one that failed) and exits non-zero if any failed.
//
//   sqlite    SQLite in the data dir, files on the local disk (the default)
//   postgres  OFFPEAK_TEST_DATABASE=postgres: every server the harness starts
//             (test/helpers/server.ts) gets a database of its own on one
//             Postgres per test process (test/helpers/postgres.ts)
//   s3        OFFPEAK_TEST_STORAGE=s3: its files go to a prefix of its own in
//             a bucket on s3rver (test/helpers/s3.ts)
//
// Which files run in the postgres and s3 modes: those that start a server
// through the harness (startTestServer or testDatabaseArgs), less the few
// in SKIP below. The others (unit tests, tests that start their own Postgres,
// bucket or executable) do the same thing in every mode, so they run once, in
// the sqlite mode. Both lists are printed.
//
//   bun scripts/test-all.ts                       all three modes
//   bun scripts/test-all.ts --mode postgres       one mode (repeat or comma-separate for more)
//   bun scripts/test-all.ts test/batches.test.ts  only these files (in every mode that takes them)
//   --shards N    split each mode into N processes (bun test --shard; default 1)
//   --jobs N      at most N processes at once (default: all)
//   --timings DIR each mode's per-file durations: read from, and written to, DIR/<mode>.json
//                 (bun test --timings; balances --shards)
//
// OFFPEAK_TEST_MODE_TIMEOUT_S (default 1800) ends a process that runs longer.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const TEST_DIR = join(ROOT, "test");

type Mode = "sqlite" | "postgres" | "s3";
const MODES: Record<Mode, Record<string, string>> = {
  sqlite: {},
  postgres: { OFFPEAK_TEST_DATABASE: "postgres" },
  s3: { OFFPEAK_TEST_STORAGE: "s3" },
};

/** Files that start servers through the harness but are left out of a mode, and why. Keep it short. */
const SKIP: Record<Exclude<Mode, "sqlite">, Record<string, string>> = {
  postgres: {
    "docs.test.ts": "the /docs page and the OpenAPI document: nothing in them is stored",
    "console.test.ts": "the console in chromium: its API calls are covered by the API suites here; minutes of browser time",
  },
  s3: {
    "docs.test.ts": "the /docs page and the OpenAPI document: nothing in them is stored",
    "console.test.ts": "the console in chromium: its API calls are covered by the API suites here; minutes of browser time",
    "storage-s3.test.ts": "runs its servers on the bucket (and on the disk) by itself already",
  },
};

/** A file that starts servers through the harness, so that the mode's variables reach them. */
const FOLLOWS_MODE = /\b(startTestServer|testDatabaseArgs)\(/;

function parseArgs(argv: string[]) {
  const modes: Mode[] = [];
  const files: string[] = [];
  let shards = 1;
  let jobs = Infinity;
  let timings: string | null = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--mode" || a.startsWith("--mode=")) {
      for (const m of value().split(",")) {
        if (!(m in MODES)) throw new Error(`unknown mode ${m} (sqlite, postgres, s3)`);
        modes.push(m as Mode);
      }
    } else if (a === "--shards" || a.startsWith("--shards=")) shards = Math.max(1, Number(value()) || 1);
    else if (a === "--jobs" || a.startsWith("--jobs=")) jobs = Math.max(1, Number(value()) || 1);
    else if (a === "--timings" || a.startsWith("--timings=")) timings = resolve(value());
    else if (a.startsWith("-")) throw new Error(`unknown option ${a}`);
    else files.push(a);
  }
  return { modes: modes.length ? [...new Set(modes)] : (Object.keys(MODES) as Mode[]), files, shards, jobs, timings };
}

interface Job {
  name: string;
  mode: Mode;
  files: string[];
  shard: string | null;
  log: string;
  /** bun test's --timings file, or null. */
  timings: string | null;
}

interface Result {
  job: Job;
  code: number | null;
  timedOut: boolean;
  seconds: number;
  pass: number;
  fail: number;
  skip: number;
  errors: number;
  output: string;
}

const count = (out: string, word: string) => {
  const m = [...out.matchAll(new RegExp(`^\\s*(\\d+) ${word}$`, "gm"))];
  return m.length ? Number(m[m.length - 1]![1]) : 0;
};

async function run(job: Job, timeoutS: number): Promise<Result> {
  const t0 = performance.now();
  const args = [process.execPath, "test", "--timeout", "60000", ...(job.shard ? [`--shard=${job.shard}`] : []),
    ...(job.timings ? [`--timings=${job.timings}`, "--update-timings"] : []), ...job.files.map((f) => relative(ROOT, f))];
  const proc = Bun.spawn(args, {
    cwd: ROOT,
    env: { ...process.env, ...MODES[job.mode], FORCE_COLOR: "0", NO_COLOR: "1" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  // bun test reports on stderr, the tests' own prints go to stdout: both into the log as they come
  // (written as they come, so that the log of a process that hangs can be read while it runs).
  const chunks: string[] = [];
  const log = Bun.file(job.log).writer();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const dec = new TextDecoder();
    for await (const c of stream) {
      const text = dec.decode(c, { stream: true });
      chunks.push(text);
      log.write(text);
      log.flush();
    }
  };
  const pumps = Promise.all([pump(proc.stdout), pump(proc.stderr)]);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    proc.kill("SIGKILL");
  }, timeoutS * 1000);
  const code = await proc.exited;
  clearTimeout(timer);
  await pumps;
  await log.end();
  const output = chunks.join("");
  return {
    job,
    code,
    timedOut,
    seconds: (performance.now() - t0) / 1000,
    pass: count(output, "pass"),
    fail: count(output, "fail"),
    skip: count(output, "skip"),
    errors: count(output, "errors?"),
    output,
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const all = readdirSync(TEST_DIR)
    .filter((f) => f.endsWith(".test.ts"))
    .sort()
    .map((f) => join(TEST_DIR, f));
  const wanted = opts.files.length ? all.filter((f) => opts.files.some((w) => resolve(ROOT, w) === f || basename(w) === basename(f))) : all;
  if (opts.files.length && wanted.length === 0) throw new Error(`no test file matches ${opts.files.join(" ")}`);
  const follows = new Set(wanted.filter((f) => FOLLOWS_MODE.test(readFileSync(f, "utf8"))));

  const logDir = mkdtempSync(join(tmpdir(), "offpeak-test-logs-"));
  if (opts.timings) mkdirSync(opts.timings, { recursive: true });
  const jobs: Job[] = [];
  for (const mode of opts.modes) {
    let files = wanted;
    if (mode !== "sqlite") {
      const skip = SKIP[mode];
      files = wanted.filter((f) => follows.has(f) && !(basename(f) in skip));
      const once = wanted.filter((f) => !follows.has(f)).map((f) => basename(f));
      const skipped = wanted.filter((f) => basename(f) in skip).map((f) => `  ${basename(f)}: ${skip[basename(f)]}`);
      console.log(`[${mode}] ${files.length} file(s)${once.length || skipped.length ? "; not in this mode:" : ""}`);
      if (once.length) console.log(`  (no server from the harness: the same in every mode, run in sqlite) ${once.join(" ")}`);
      for (const s of skipped) console.log(s);
    } else console.log(`[sqlite] ${files.length} file(s)`);
    if (files.length === 0) continue;
    const n = Math.min(opts.shards, files.length);
    for (let i = 1; i <= n; i++) {
      const name = n > 1 ? `${mode} ${i}/${n}` : mode;
      jobs.push({
        name,
        mode,
        files,
        shard: n > 1 ? `${i}/${n}` : null,
        log: join(logDir, `${name.replace(/\W+/g, "-")}.log`),
        timings: opts.timings ? join(opts.timings, `${mode}.json`) : null,
      });
    }
  }

  const timeoutS = Number(process.env.OFFPEAK_TEST_MODE_TIMEOUT_S) || 1800;
  console.log(`${jobs.length} process(es), ${opts.jobs === Infinity ? "all" : opts.jobs} at a time; logs in ${logDir}`);
  const t0 = performance.now();
  const results: Result[] = [];
  const queue = [...jobs];
  const worker = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      console.log(`[${job.name}] started`);
      const r = await run(job, timeoutS);
      results.push(r);
      const ok = r.code === 0 && !r.timedOut;
      console.log(
        `[${job.name}] ${ok ? "ok" : "FAILED"} in ${r.seconds.toFixed(0)} s: ${r.pass} pass, ${r.fail} fail, ${r.skip} skip` +
          `${r.errors ? `, ${r.errors} error(s)` : ""}${r.timedOut ? ` (killed after ${timeoutS} s)` : ""} (exit ${r.code})`,
      );
      if (!ok) {
        console.log(`──── [${job.name}] its whole output (${job.log}) ────`);
        console.log(r.output.trimEnd());
        console.log(`──── end of [${job.name}] ────`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.jobs, jobs.length) }, worker));

  const wall = (performance.now() - t0) / 1000;
  console.log("");
  console.log(`summary (${wall.toFixed(0)} s wall):`);
  for (const r of results.sort((a, b) => jobs.indexOf(a.job) - jobs.indexOf(b.job))) {
    const ok = r.code === 0 && !r.timedOut;
    const ran = /^Ran .*$/m.exec(r.output)?.[0] ?? "no summary from bun test";
    console.log(`  ${ok ? "ok    " : "FAILED"} ${r.job.name.padEnd(14)} ${r.seconds.toFixed(0).padStart(5)} s  ${ran}`);
  }
  const failedJobs = results.filter((r) => r.code !== 0 || r.timedOut);
  const pass = results.reduce((n, r) => n + r.pass, 0);
  const skip = results.reduce((n, r) => n + r.skip, 0);
  // A process that failed without counting a failure (an error between tests, killed) still counts as one.
  const fail = results.reduce((n, r) => n + Math.max(r.fail + r.errors, r.code !== 0 || r.timedOut ? 1 : 0), 0);
  console.log(`total: ${pass} passed, ${fail} failed, ${skip} skipped`);
  process.exit(failedJobs.length ? 1 : 0);
}

main().catch((e) => {
  console.error(`test-all: ${(e as Error).message}`);
  process.exit(2);
});

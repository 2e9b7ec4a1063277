// Upstream outages under a big batch (docs/CONTRACT.md §11): a 100,000-line chat
// batch against a loopback engine (test/helpers/engineReplicas.ts at a fixed
// latency, its own process, arrivals kept; its control port stops and starts it)
// at max_concurrency 64. The engine is stopped mid-batch (connections refused,
// as while a real engine restarts) for 30 s, and in a second run for 120 s,
// then started again on the same port (RETURN_OFFSET_MS, default 500 ms, past
// the whole seconds, so that it does not come back in step with probes sent
// once a second: a typical return, not the luckiest). Reported per outage:
//   - failed lines (must be 0) and the batch's final status;
//   - recovery: time from the engine's return until its own request rate, in
//     250 ms buckets counted from the return, first reaches 90% of the rate
//     before the outage (median bucket from 1 s after the start to the stop);
//     also the first probe and the first batch request after the return;
//   - requests sent to the engine while it was down (probes and tries): the
//     engine cannot count refused connections, so they are counted by the
//     kernel: the bench runs in its own network namespace (unshare -n) where
//     /proc/net/snmp's Tcp AttemptFails counts exactly the refused connects
//     (everything else on loopback here connects to ports that are up).
//     Without a private namespace the counter is the machine's: approximate.
//     offpeak's own /metrics (offpeak_upstream_errors_total) is shown beside.
// And the normal rate with no outage, in lines/s, alternating runs of this
// tree ("after") and of the commit before the first `Upstream health:` commit
// ("before", a git worktree in /tmp), with their peak RSS.
//
// Usage (never two benchmarks at once):
//   flock /tmp/offpeak-bench.lock bun bench/outage.ts [--quick] [--lines N]
//       [--outages 30,120] [--runs 3] [--latency-ms 10] [--before REV|none] [--after REV]
//       [--outage-before] [--return-offset-ms 500] [--no-netns]
//   --quick: 10,000 lines, outages of 3 and 6 s, one normal run per side.
//   --outage-before: also run the outages on the "before" side (it fails lines).
//   --after REV: a worktree of REV instead of this tree as it is (which may
//     hold others' uncommitted work).
//   --outages "": normal runs only.
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchArgs, engineArgs, ENGINE_SCRIPT, freePort, loadAverage, machineNote, median, ROOT, spawnBun, waitForHttp, type Child } from "./lib";

// ── options ────────────────────────────────────────────────────────────────

const argv = process.argv.slice(2);
const { opt, flag } = benchArgs(argv);
const quick = flag("quick");
const LINES = Number(opt("lines") ?? (quick ? 10_000 : 100_000));
const OUTAGES = (opt("outages") ?? (quick ? "3,6" : "30,120")).split(",").filter(Boolean).map(Number);
const RUNS = Number(opt("runs") ?? (quick ? 1 : 3));
const LATENCY_MS = Number(opt("latency-ms") ?? 10);
const CONCURRENCY = 64;
/** The engine is stopped once it has received this share of the lines. */
const STOP_AT = 0.4;
const BUCKET_MS = 250;
/** The engine comes back this long after the whole seconds of the outage. */
const RETURN_OFFSET_MS = Number(opt("return-offset-ms") ?? 500);
const KEY = "sk-op-bench-admin-key-000000000000000000000";
const auth = { authorization: `Bearer ${KEY}` };

// ── a private network namespace, so the kernel's counter of refused connects is ours alone ──

if (!flag("no-netns") && process.env.OFFPEAK_BENCH_NETNS !== "1") {
  const probe = Bun.spawnSync(["unshare", "-n", "sh", "-c", "ip link set lo up"], { stderr: "pipe" });
  if (probe.exitCode === 0) {
    const p = Bun.spawn(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", process.execPath, import.meta.path, ...argv], {
      env: { ...process.env, OFFPEAK_BENCH_NETNS: "1" },
      stdio: ["inherit", "inherit", "inherit"],
    });
    process.exit(await p.exited);
  }
  console.log(`(no private network namespace: ${probe.stderr.toString().trim() || "unshare failed"}; refused connects are counted machine-wide)`);
}
const privateNetns = process.env.OFFPEAK_BENCH_NETNS === "1";

/** Refused connection attempts so far (Tcp AttemptFails in /proc/net/snmp). */
function attemptFails(): number {
  const lines = readFileSync("/proc/net/snmp", "utf8").split("\n").filter((l) => l.startsWith("Tcp:"));
  const names = lines[0]!.split(/\s+/);
  const values = lines[1]!.split(/\s+/);
  return Number(values[names.indexOf("AttemptFails")]);
}

// ── the two trees ──────────────────────────────────────────────────────────

function git(args: string[], cwd = ROOT): string {
  const r = Bun.spawnSync(["git", ...args], { cwd, stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString().trim();
}

function describeTree(root: string): string {
  const head = git(["log", "-1", "--format=%h %s"], root);
  const dirty = git(["status", "--porcelain", "--untracked-files=no"], root) !== "";
  return `${head.slice(0, 90)}${dirty ? " (+ uncommitted changes)" : ""}`;
}

/** A git worktree of `rev` in /tmp (made once, reused), sharing this tree's node_modules. */
function worktree(rev: string): string {
  const root = join(tmpdir(), `offpeak-bench-rev-${rev.slice(0, 12)}`);
  if (!existsSync(join(root, "src", "main.ts"))) git(["worktree", "add", "--detach", root, rev]);
  if (!existsSync(join(root, "node_modules"))) symlinkSync(join(ROOT, "node_modules"), join(root, "node_modules"));
  return root;
}

/** The "after" tree: this one as it is, or a worktree of --after REV (to leave out others' later changes). */
function afterTree(): string {
  const asked = opt("after");
  return asked ? worktree(git(["rev-parse", asked])) : ROOT;
}

/** The "before" tree: a worktree of REV (default: the parent of the first `Upstream health:` commit). */
function beforeTree(): { root: string; rev: string; note: string } | null {
  const asked = opt("before");
  if (asked === "none") return null;
  let rev: string;
  let note: string;
  if (asked) {
    rev = git(["rev-parse", asked]);
    note = `--before ${asked}`;
  } else {
    const commits = git(["log", "--format=%H %s"]).split("\n");
    const health = commits.filter((l) => / Upstream health:/.test(l)).map((l) => l.slice(0, 40));
    if (health.length === 0) {
      rev = git(["rev-parse", "HEAD"]);
      note = "no `Upstream health:` commit yet: HEAD";
    } else {
      rev = git(["rev-parse", `${health.at(-1)}^`]);
      note = "the parent of the first `Upstream health:` commit";
    }
  }
  return { root: worktree(rev), rev, note };
}

// ── the engine ─────────────────────────────────────────────────────────────

const enginePort = freePort();
const controlPort = freePort();
const engineBase = `http://127.0.0.1:${enginePort}/v1`;
const control = `http://127.0.0.1:${controlPort}`;
const engine = spawnBun(engineArgs({ ports: [enginePort], latencyMs: LATENCY_MS, controlPort, arrivals: true }));
const ctl = async (path: string, method = "GET"): Promise<any> => (await fetch(control + path, { method })).json();

// ── one batch run ──────────────────────────────────────────────────────────

interface Run {
  side: "before" | "after";
  outageS: number | null;
  status: string;
  completed: number;
  failed: number;
  seconds: number;
  linesPerS: number;
  peakRssMb: number;
  // outage runs only
  dropped?: number;
  refusedWhileDown?: number;
  refusedAfterFirst5s?: number;
  refusedPerSAfter5s?: number;
  downSeconds?: number;
  offpeakErrorsWhileDown?: number;
  postsWhileDown?: number;
  firstProbeS?: number | null;
  firstPostS?: number | null;
  recoveryS?: number | null;
  preRate?: number;
  perSecondRefused?: number[];
}

async function inputFile(): Promise<string> {
  const path = `/tmp/offpeak-outage-${LINES}.jsonl`;
  const w = Bun.file(path).writer();
  for (let i = 0; i < LINES; i++)
    w.write(JSON.stringify({ custom_id: `o-${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "fake-model", messages: [{ role: "user", content: `question ${i}` }], max_tokens: 16 } }) + "\n");
  await w.end();
  return path;
}

async function startServer(root: string): Promise<{ child: Child; base: string; dataDir: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-outage-"));
  const port = freePort();
  const config = join(dataDir, "config.json");
  writeFileSync(config, JSON.stringify({ upstreams: [{ name: "engine", base_url: engineBase, models: ["fake-model"], max_concurrency: CONCURRENCY }] }));
  const main = join(root, "src", "main.ts");
  const child = spawnBun([main, "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir, "--config", config], {
    cwd: root,
    env: { OFFPEAK_ADMIN_KEY: KEY, OFFPEAK_LOG_LEVEL: "error" },
  });
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc, 30_000);
  child.assertRuns(main);
  return { child, base: `http://127.0.0.1:${port}/api/v1`, dataDir };
}

/** Sum of offpeak_upstream_errors_total over all its series. */
async function offpeakErrors(base: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: auth })).text();
  let n = 0;
  for (const line of text.split("\n")) if (line.startsWith("offpeak_upstream_errors_total{")) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  return n;
}

async function runBatch(side: "before" | "after", root: string, input: string, outageS: number | null): Promise<Run> {
  const { child, base, dataDir } = await startServer(root);
  try {
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", Bun.file(input), "input.jsonl");
    const up = await fetch(`${base}/files`, { method: "POST", headers: auth, body: form });
    if (!up.ok) throw new Error(`upload: ${up.status} ${await up.text()}`);
    const file = (await up.json()) as { id: string };
    await ctl("/reset", "POST");
    const t0 = Date.now();
    const created = (await (
      await fetch(`${base}/batches`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
      })
    ).json()) as { id: string };

    const extra: Partial<Run> = {};
    let downAt = 0;
    let upAt = 0;
    if (outageS !== null) {
      while ((await ctl("/count")).posts < LINES * STOP_AT) await Bun.sleep(20);
      const fails0 = attemptFails();
      const errors0 = await offpeakErrors(base);
      const down = await ctl("/down", "POST");
      downAt = down.at;
      extra.dropped = down.inFlight;
      const perSecond: number[] = [];
      let last = fails0;
      for (let s = 1; s <= outageS; s++) {
        await Bun.sleep(Math.max(0, downAt + s * 1000 - Date.now()));
        const now = attemptFails();
        perSecond.push(now - last);
        last = now;
      }
      // Between two once-a-second probes, not in step with them.
      await Bun.sleep(Math.max(0, downAt + outageS * 1000 + RETURN_OFFSET_MS - Date.now()));
      const fails1 = attemptFails();
      extra.offpeakErrorsWhileDown = (await offpeakErrors(base)) - errors0;
      upAt = (await ctl("/up", "POST")).at;
      extra.downSeconds = (upAt - downAt) / 1000;
      extra.refusedWhileDown = fails1 - fails0;
      extra.refusedAfterFirst5s = perSecond.slice(5).reduce((a, b) => a + b, 0);
      extra.refusedPerSAfter5s = extra.refusedAfterFirst5s / Math.max(1, perSecond.length - 5);
      extra.perSecondRefused = perSecond;
    }

    let batch: { status: string; request_counts: { total: number; completed: number; failed: number } };
    for (;;) {
      batch = (await (await fetch(`${base}/batches/${created.id}`, { headers: auth })).json()) as typeof batch;
      if (["completed", "failed", "expired", "cancelled"].includes(batch.status)) break;
      await Bun.sleep(100);
    }
    const seconds = (Date.now() - t0) / 1000;
    const run: Run = {
      side,
      outageS,
      status: batch.status,
      completed: batch.request_counts.completed,
      failed: batch.request_counts.failed,
      seconds,
      linesPerS: LINES / (seconds - (outageS === null ? 0 : extra.downSeconds!)),
      peakRssMb: child.peakRssMb(),
      ...extra,
    };
    if (outageS !== null) Object.assign(run, recovery(await ctl("/stats"), downAt, upAt));
    return run;
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** From the engine's own arrival times: the rate before the stop, and how soon after the return it came back. */
function recovery(stats: { t0: number; postTimes: number[]; probeTimes: number[] }, downAt: number, upAt: number) {
  const down = downAt - stats.t0;
  const up = upAt - stats.t0;
  const posts = stats.postTimes;
  // Before: 250 ms buckets from 1 s after the first request (a third of the
  // way to the stop in short runs) to the stop.
  const first = posts[0] ?? 0;
  const pre: number[] = [];
  for (let from = first + Math.min(1000, (down - first) / 3); from + BUCKET_MS <= down; from += BUCKET_MS) pre.push(count(posts, from, from + BUCKET_MS));
  const preRate = median(pre);
  // After: buckets counted from the return, up to the last full one before the batch ran out.
  const lastPost = posts.at(-1) ?? up;
  let recoveryS: number | null = null;
  for (let from = up; from + BUCKET_MS <= lastPost; from += BUCKET_MS) {
    if (count(posts, from, from + BUCKET_MS) >= 0.9 * preRate) {
      recoveryS = (from + BUCKET_MS - up) / 1000;
      break;
    }
  }
  const firstAfter = (xs: number[]) => {
    const x = xs.find((t) => t >= up);
    return x === undefined ? null : (x - up) / 1000;
  };
  return {
    preRate: (preRate * 1000) / BUCKET_MS,
    recoveryS,
    firstProbeS: firstAfter(stats.probeTimes),
    firstPostS: firstAfter(posts),
    postsWhileDown: count(posts, down, up),
  };
}

/** How many of the sorted `xs` are in [from, to). */
function count(xs: number[], from: number, to: number): number {
  let n = 0;
  for (const x of xs) if (x >= from && x < to) n++;
  return n;
}

// ── main ───────────────────────────────────────────────────────────────────

const fmt = (n: number, d = 0) => n.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
let exitCode = 0;
try {
  await waitForHttp(`${control}/count`, engine.proc);
  engine.assertRuns(ENGINE_SCRIPT);
  const before = beforeTree();
  const AFTER = afterTree();
  const input = await inputFile();
  console.log(`outage bench: ${fmt(LINES)} lines, max_concurrency ${CONCURRENCY}, engine latency ${LATENCY_MS} ms, engine stopped after ${STOP_AT * 100}% of the lines, back ${RETURN_OFFSET_MS} ms after the outage's whole seconds`);
  console.log(`machine: ${machineNote()}; load ${loadAverage()}`);
  console.log(`after : ${AFTER}: ${describeTree(AFTER)}`);
  if (before) console.log(`before: ${before.root}: ${describeTree(before.root)} (${before.note})`);
  console.log(`refused connects counted ${privateNetns ? "exactly (private network namespace)" : "machine-wide (approximate)"}`);

  const normal: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    // Alternate, and swap who goes first every other round.
    const order: ("before" | "after")[] = before ? (i % 2 === 0 ? ["before", "after"] : ["after", "before"]) : ["after"];
    for (const side of order) {
      const r = await runBatch(side, side === "after" ? AFTER : before!.root, input, null);
      normal.push(r);
      console.log(
        `normal ${side.padEnd(6)} run ${i + 1}: ${r.status}, ${fmt(r.completed)} completed, ${r.failed} failed, ${r.seconds.toFixed(2)} s: ${fmt(r.linesPerS)} lines/s, peak RSS ${r.peakRssMb.toFixed(0)} MB`,
      );
      if (r.status !== "completed" || r.failed !== 0) exitCode = 1;
    }
  }

  const outages: Run[] = [];
  const sides: ("before" | "after")[] = flag("outage-before") && before ? ["after", "before"] : ["after"];
  for (const s of OUTAGES)
    for (const side of sides) {
      const r = await runBatch(side, side === "after" ? AFTER : before!.root, input, s);
      outages.push(r);
      const opt = (x: number | null | undefined) => (x === null || x === undefined ? "n/a" : `${x.toFixed(2)} s`);
      console.log(
        `outage ${s} s (${side}): ${r.status}, ${fmt(r.completed)} completed, ${r.failed} failed; ${r.dropped} requests in flight at the stop; down ${r.downSeconds!.toFixed(1)} s`,
      );
      console.log(
        `  while down: ${r.refusedWhileDown} refused connects (${r.perSecondRefused!.length > 5 ? `${r.refusedAfterFirst5s} in seconds 6-${r.perSecondRefused!.length}: ${r.refusedPerSAfter5s!.toFixed(2)}/s` : "none after the first 5 s: too short"}), offpeak counted ${r.offpeakErrorsWhileDown} upstream errors, engine received ${r.postsWhileDown}`,
      );
      console.log(`  per second: ${r.perSecondRefused!.join(" ")}`);
      console.log(
        `  after the return: first probe ${opt(r.firstProbeS)}, first batch request ${opt(r.firstPostS)}, ≥90% of the rate before (${fmt(r.preRate!)} req/s) after ${opt(r.recoveryS)}; ${fmt(r.linesPerS)} lines/s outside the outage; peak RSS ${r.peakRssMb.toFixed(0)} MB`,
      );
      if (side === "after" && (r.status !== "completed" || r.failed !== 0)) exitCode = 1;
    }

  console.log("\nsummary");
  const rates = (side: string) => normal.filter((r) => r.side === side).map((r) => r.linesPerS);
  const a = rates("after");
  const b = rates("before");
  console.log(`  normal, after : median ${fmt(median(a))} lines/s [${a.map((x) => fmt(x)).join(" · ")}], peak RSS ${fmt(Math.max(...normal.filter((r) => r.side === "after").map((r) => r.peakRssMb)))} MB`);
  if (b.length) {
    console.log(`  normal, before: median ${fmt(median(b))} lines/s [${b.map((x) => fmt(x)).join(" · ")}], peak RSS ${fmt(Math.max(...normal.filter((r) => r.side === "before").map((r) => r.peakRssMb)))} MB`);
    console.log(`  ratio after/before: ${(median(a) / median(b)).toFixed(2)}×`);
  }
  for (const r of outages)
    console.log(
      `  outage ${r.outageS} s (${r.side}): failed ${r.failed} (target 0), recovery ${r.recoveryS === null || r.recoveryS === undefined ? "n/a" : r.recoveryS.toFixed(2) + " s"} (target ≤ 2 s), refused connects while down ${r.refusedWhileDown}, ${r.refusedPerSAfter5s!.toFixed(2)}/s after the first 5 s (target ≤ 1/s), peak RSS ${r.peakRssMb.toFixed(0)} MB`,
    );
} finally {
  await engine.stop();
}
process.exit(exitCode);

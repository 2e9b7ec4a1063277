// One model on many engines (docs/CONTRACT.md §21, "Targets"), against engine
// replicas with a prefix cache each (test/helpers/engineReplicas.ts: a batch
// of --max-running requests, a priority-ordered waiting queue, an LRU of 4
// prefixes; a request's work is its decode plus its prompt's prefill, 90% of
// its system prompt's prefill saved on a cache hit). The replicas run in this
// process; offpeak runs as a child (its peak RSS is read from /proc), with
// one upstream listing the replicas under `replicas`.
//
// Scenarios (--only a,b,c,d,e; all by default):
//   a  4 replicas, a batch over --prefixes long system prompts (3,000–5,000
//      characters) in random order, one of them on a quarter of the lines.
//      Baseline: this script sending the same lines round-robin to the
//      replicas, --max-running at once to each (the engine's batch: with no
//      cliff, more only waits; --sweep tries ½×, 1× and 2× and keeps the
//      best). offpeak: the batch through the Batch API, timed from create to
//      completed. Target ≥ 2.2×.
//   b  the same with no shared prefix (every line its own ≈1,000-character
//      prompt) against a direct least-loaded client. Target ≥ 0.9×.
//   c  1 → 2 replicas through offpeak, lines as in b. Target ≥ 1.9×.
//   d  one replica of 4 killed once 40% of a batch (lines as in a) is
//      answered: failed lines (must be 0), lines resent (requests the
//      replicas received − lines) beside what the killed replica held, and
//      the time until the replicas' answers per second (over 1 s) are back
//      to 3/4 of the rate before the kill. The replica is restarted after.
//   e  interactive chat completions through offpeak, one at a time, while a
//      batch keeps every replica's batch full, against the same requests
//      with nothing else running. Target ≤ 1.5× (medians).
// Baseline and offpeak alternate, the order swapped each run; figures are
// medians over --runs. Each run starts with empty caches and zeroed counts.
//
// Usage: bun bench/replicas.ts [--only a,b,c,d,e] [--lines 2000] [--runs 3]
//   [--prefixes 40] [--prefix-chars 4000] [--max-running 16] [--decode-ms 100]
//   [--prefill-ms 200 (per 1000 characters)] [--cache 4] [--concurrency N|auto
//   (offpeak's max_concurrency, each replica; default --max-running)]
//   [--batch-priority 1] [--workers N (OFFPEAK_BATCH_WORKERS)] [--sweep]
//   [--preempt (the engines preempt running requests of a higher priority value)]
//   [--direct-only] [--timeout-s 600] [--seed 1]
// Run it alone: flock /tmp/offpeak-bench.lock bun bench/replicas.ts
import { rmSync, writeFileSync } from "node:fs";
import { benchArgs, loadAverage, machineNote, median, percentile } from "./lib";
import { auth, startBenchServer, uploadBatchFile, type BenchServer } from "./server";
import { prefixOf, replicaShape, replicaThroughput, startEngineReplicas, workOf, type EngineReplicas, type ReplicaShape } from "../test/helpers/engineReplicas";

const args = benchArgs();
const num = (name: string, d: number) => {
  const v = args.opt(name);
  if (v === undefined) return d;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} wants a number, not ${v}`);
  return n;
};
if (args.flag("help")) {
  console.log(
    "usage: bun bench/replicas.ts [--only a,b,c,d,e] [--lines 2000] [--runs 3] [--prefixes 40] [--prefix-chars 4000] [--max-running 16] [--decode-ms 100] [--prefill-ms 200] [--cache 4] [--concurrency N|auto] [--batch-priority 1] [--workers N] [--sweep] [--preempt] [--direct-only] [--timeout-s 600] [--seed 1]",
  );
  process.exit(0);
}
const ONLY = new Set((args.opt("only") ?? "a,b,c,d,e").split(",").map((s) => s.trim()));
const LINES = num("lines", 2000);
const RUNS = Math.max(1, num("runs", 3));
const PREFIXES = Math.max(2, num("prefixes", 40));
const PREFIX_CHARS = num("prefix-chars", 4000);
const SEED = num("seed", 1);
const TIMEOUT_MS = num("timeout-s", 600) * 1000;
const DIRECT_ONLY = args.flag("direct-only");
const SHAPE: ReplicaShape = replicaShape({
  maxRunning: num("max-running", 16),
  decodeMs: num("decode-ms", 100),
  prefillMsPerKChar: num("prefill-ms", 200),
  cachePrefixes: num("cache", 4),
  preempt: args.flag("preempt"),
});
const CONCURRENCY: number | "auto" = args.opt("concurrency") === "auto" ? "auto" : num("concurrency", SHAPE.maxRunning);
const BATCH_PRIORITY = num("batch-priority", 1);
const WORKERS = args.opt("workers");
const MODEL = "engine-chat";
const TERMINAL = ["completed", "failed", "expired", "cancelled"];

// ---------------------------------------------------------------- workloads

/** A deterministic source of numbers in [0, 1). */
function rng(seed: number): () => number {
  let s = (seed * 2654435761) % 2147483647 || 1;
  return () => {
    s = (s * 16807) % 2147483647;
    return (s - 1) / 2147483646;
  };
}

const WORDS = "the a engine batch cache prefix token model answer question request replica system prompt latency throughput queue line file shard worker schedule priority window deadline".split(" ");
function text(r: () => number, head: string, chars: number): string {
  let s = head;
  while (s.length < chars) s += " " + WORDS[Math.floor(r() * WORDS.length)];
  return s.slice(0, chars);
}

interface Workload {
  name: string;
  /** Request bodies, in file order. */
  bodies: object[];
  /** The same bodies as JSON, for the direct clients. */
  json: string[];
  /** The JSONL file offpeak is given. */
  path: string;
}

function workload(name: string, bodies: object[]): Workload {
  const path = `/tmp/offpeak-replicas-${process.pid}-${name}.jsonl`;
  const json = bodies.map((b) => JSON.stringify(b));
  writeFileSync(path, json.map((b, i) => `{"custom_id":"${name}-${i}","method":"POST","url":"/v1/chat/completions","body":${b}}\n`).join(""));
  return { name, bodies, json, path };
}

/** Lines over `prefixes` system prompts of 0.75–1.25 × prefixChars, prompt 0 on a quarter of them, in random order. */
function sharedPrefixes(lines: number): Workload {
  const r = rng(SEED);
  const prompts = Array.from({ length: PREFIXES }, (_, k) => text(r, `You are assistant ${k} of ${PREFIXES}. Follow these rules.`, Math.round(PREFIX_CHARS * (0.75 + 0.5 * r()))));
  const which = Array.from({ length: lines }, (_, i) => (i < Math.round(lines / 4) ? 0 : 1 + Math.floor(r() * (PREFIXES - 1))));
  for (let i = which.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [which[i], which[j]] = [which[j]!, which[i]!];
  }
  return workload(
    "shared",
    which.map((k, i) => ({ model: MODEL, messages: [{ role: "system", content: prompts[k] }, { role: "user", content: text(r, `Question ${i}:`, 100) }], max_tokens: 16 })),
  );
}

/** Lines of their own ≈1,000-character prompts, no system prompt: every prefix differs. */
function noShared(lines: number): Workload {
  const r = rng(SEED + 1);
  return workload(
    "unique",
    Array.from({ length: lines }, (_, i) => ({ model: MODEL, messages: [{ role: "user", content: text(r, `Line ${i}.`, 800 + Math.floor(400 * r())) }], max_tokens: 16 })),
  );
}

/** What the workload's lines cost the engine on average, all hits and all misses (ms of running alone). */
function workRange(w: Workload): { hit: number; miss: number } {
  let hit = 0;
  let miss = 0;
  for (const b of w.bodies) {
    const p = prefixOf(b, SHAPE);
    hit += workOf(SHAPE, p, true);
    miss += workOf(SHAPE, p, false);
  }
  return { hit: hit / w.bodies.length, miss: miss / w.bodies.length };
}

// ---------------------------------------------------------------- direct clients

async function send(url: string, body: string): Promise<boolean> {
  try {
    const res = await fetch(`${url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

interface Direct {
  seconds: number;
  failed: number;
}

/** Line i to replica i mod n, `perReplica` at once to each. */
async function roundRobin(urls: string[], w: Workload, perReplica: number): Promise<Direct> {
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(
    urls.map(async (url, k) => {
      let next = k;
      await Promise.all(
        Array.from({ length: perReplica }, async () => {
          while (next < w.json.length) {
            const i = next;
            next += urls.length;
            if (!(await send(url, w.json[i]!))) failed++;
          }
        }),
      );
    }),
  );
  return { seconds: (performance.now() - t0) / 1000, failed };
}

/** `perReplica × n` at once, each line to the replica this client has the fewest in flight on (ties in turn). */
async function leastLoaded(urls: string[], w: Workload, perReplica: number): Promise<Direct> {
  let failed = 0;
  let next = 0;
  let turn = 0;
  const inFlight = urls.map(() => 0);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: perReplica * urls.length }, async () => {
      while (next < w.json.length) {
        const i = next++;
        let best = -1;
        for (let j = 0; j < urls.length; j++) {
          const k = (turn + j) % urls.length;
          if (best < 0 || inFlight[k]! < inFlight[best]!) best = k;
        }
        turn = (turn + 1) % urls.length;
        inFlight[best]!++;
        if (!(await send(urls[best]!, w.json[i]!))) failed++;
        inFlight[best]!--;
      }
    }),
  );
  return { seconds: (performance.now() - t0) / 1000, failed };
}

// ---------------------------------------------------------------- offpeak

function upstreamConfig(urls: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  // docs/CONTRACT.md §21: `replicas` instead of base_url; max_concurrency applies to each replica.
  return {
    name: "engines",
    engine: "vllm",
    replicas: urls.map((base_url) => ({ base_url })),
    models: [MODEL],
    max_concurrency: CONCURRENCY,
    queue_size: 1024,
    batch_priority: BATCH_PRIORITY,
    ...extra,
  };
}

async function startOffpeak(urls: string[]): Promise<BenchServer> {
  return startBenchServer(WORKERS ? { OFFPEAK_BATCH_WORKERS: WORKERS } : {}, { upstreams: [upstreamConfig(urls)] });
}

interface BatchRecord {
  id: string;
  status: string;
  request_counts: { total: number; completed: number; failed: number };
}

async function createBatch(server: BenchServer, fileId: string): Promise<BatchRecord> {
  const res = await fetch(`${server.base}/batches`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  });
  if (!res.ok) throw new Error(`create batch: ${res.status} ${await res.text()}`);
  return (await res.json()) as BatchRecord;
}

const getBatch = async (server: BenchServer, id: string) => (await fetch(`${server.base}/batches/${id}`, { headers: auth }).then((r) => r.json())) as BatchRecord;

/** Creates a batch of the file and waits for it to end; seconds from create to the record showing it ended. */
async function offpeakBatch(server: BenchServer, fileId: string, during?: (b: BatchRecord) => Promise<void>): Promise<{ seconds: number; batch: BatchRecord }> {
  const t0 = performance.now();
  let batch = await createBatch(server, fileId);
  const id = batch.id;
  const running = during?.(batch);
  while (!TERMINAL.includes(batch.status)) {
    if (performance.now() - t0 > TIMEOUT_MS) {
      await fetch(`${server.base}/batches/${id}/cancel`, { method: "POST", headers: auth });
      throw new Error(`batch ${id} not done in ${TIMEOUT_MS / 1000} s: ${JSON.stringify(batch.request_counts)}`);
    }
    await Bun.sleep(100);
    batch = await getBatch(server, id);
  }
  const seconds = (performance.now() - t0) / 1000;
  await running;
  return { seconds, batch };
}

// ---------------------------------------------------------------- reporting

const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);
const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const hitRate = (e: EngineReplicas) => {
  const t = e.total();
  return t.hits + t.misses ? t.hits / (t.hits + t.misses) : NaN;
};
const verdict = (ratio: number, target: number, atLeast = true) => `target ${atLeast ? "≥" : "≤"} ${target}: ${(atLeast ? ratio >= target : ratio <= target) ? "met" : "NOT met"}`;

interface Side {
  seconds: number[];
  hits: number[];
  failed: number[];
  /** Requests each replica received, the last run. */
  spread: string;
}
const side = (): Side => ({ seconds: [], hits: [], failed: [], spread: "" });
function sideLine(name: string, lines: number, s: Side): string {
  const sec = median(s.seconds);
  return `  ${name.padEnd(26)} ${f2(sec).padStart(7)} s  ${f1(lines / sec).padStart(7)} lines/s  cache hits ${pct(median(s.hits)).padStart(6)}  failed ${Math.max(...s.failed)}  per replica ${s.spread}  (runs: ${s.seconds.map(f2).join(", ")} s)`;
}

/**
 * Alternates `base` and `other` over RUNS runs (the order swapped each run),
 * resetting the replicas (caches, counts) before each; returns both sides.
 */
async function alternate(e: EngineReplicas, base: () => Promise<Direct>, other: () => Promise<Direct>): Promise<{ base: Side; other: Side }> {
  const out = { base: side(), other: side() };
  for (let r = 0; r < RUNS; r++) {
    const order: ["base" | "other", () => Promise<Direct>][] = [
      ["base", base],
      ["other", other],
    ];
    if (r % 2) order.reverse();
    for (const [name, fn] of order) {
      e.reset();
      const d = await fn();
      out[name].seconds.push(d.seconds);
      out[name].failed.push(d.failed);
      out[name].hits.push(hitRate(e));
      out[name].spread = e.stats().map((s) => s.seen).join("/");
    }
  }
  return out;
}

/** `fn` over RUNS runs alone (--direct-only), the replicas reset before each. */
async function repeat(e: EngineReplicas, fn: () => Promise<Direct>): Promise<Side> {
  const out = side();
  for (let r = 0; r < RUNS; r++) {
    e.reset();
    const d = await fn();
    out.seconds.push(d.seconds);
    out.failed.push(d.failed);
    out.hits.push(hitRate(e));
    out.spread = e.stats().map((s) => s.seen).join("/");
  }
  return out;
}

/** offpeak's batch run as a Direct (its failed lines from the batch record). */
async function viaOffpeak(server: BenchServer, fileId: string, lines: number): Promise<Direct> {
  const { seconds, batch } = await offpeakBatch(server, fileId);
  if (batch.status !== "completed") console.log(`  (the batch ended ${batch.status}: ${JSON.stringify(batch.request_counts)})`);
  return { seconds, failed: batch.request_counts.failed + (lines - batch.request_counts.completed - batch.request_counts.failed) };
}

async function bestFixed(urls: string[], w: Workload, e: EngineReplicas): Promise<number> {
  if (!args.flag("sweep")) return SHAPE.maxRunning;
  const tried: string[] = [];
  let best = SHAPE.maxRunning;
  let bestSec = Infinity;
  for (const c of [Math.max(1, Math.round(SHAPE.maxRunning / 2)), SHAPE.maxRunning, 2 * SHAPE.maxRunning]) {
    e.reset();
    const d = await roundRobin(urls, w, c);
    tried.push(`${c}: ${f1(w.json.length / d.seconds)}/s`);
    // A tie (within 2%) keeps the smaller concurrency.
    if (d.seconds < bestSec * 0.98) [best, bestSec] = [c, d.seconds];
  }
  console.log(`  sweep, round-robin, per replica: ${tried.join(", ")} → ${best}`);
  return best;
}

// ---------------------------------------------------------------- scenarios

async function scenarioA(e: EngineReplicas): Promise<void> {
  const w = sharedPrefixes(LINES);
  const wr = workRange(w);
  console.log(
    `\n(a) 4 replicas, ${LINES} lines over ${PREFIXES} system prompts of ≈${PREFIX_CHARS} characters (one on a quarter of the lines), random order; work a line: ${f1(wr.miss)} ms on a miss, ${f1(wr.hit)} ms on a hit`,
  );
  const c = await bestFixed(e.baseUrls, w, e);
  const direct = () => roundRobin(e.baseUrls, w, c);
  if (DIRECT_ONLY) {
    const s = await repeat(e, direct);
    console.log(sideLine(`direct round-robin ×${c}`, LINES, s));
    return;
  }
  const server = await startOffpeak(e.baseUrls);
  try {
    const file = await uploadBatchFile(server.base, w.path);
    const r = await alternate(e, direct, () => viaOffpeak(server, file.id, LINES));
    console.log(sideLine(`direct round-robin ×${c}`, LINES, r.base));
    console.log(sideLine("offpeak batch", LINES, r.other));
    const ratio = median(r.base.seconds) / median(r.other.seconds);
    console.log(`  offpeak / direct: ${f2(ratio)}× (${verdict(ratio, 2.2)}); offpeak peak RSS ${f1(server.peakRssMb())} MB`);
  } finally {
    await server.stop();
  }
}

async function scenarioB(e: EngineReplicas): Promise<void> {
  const w = noShared(LINES);
  const wr = workRange(w);
  console.log(`\n(b) 4 replicas, ${LINES} lines with no shared prefix (≈1,000-character prompts); work a line ${f1(wr.miss)} ms`);
  const direct = () => leastLoaded(e.baseUrls, w, SHAPE.maxRunning);
  if (DIRECT_ONLY) {
    const s = await repeat(e, direct);
    console.log(sideLine(`direct least-loaded ×${SHAPE.maxRunning * 4}`, LINES, s));
    return;
  }
  const server = await startOffpeak(e.baseUrls);
  try {
    const file = await uploadBatchFile(server.base, w.path);
    const r = await alternate(e, direct, () => viaOffpeak(server, file.id, LINES));
    console.log(sideLine(`direct least-loaded ×${SHAPE.maxRunning * 4}`, LINES, r.base));
    console.log(sideLine("offpeak batch", LINES, r.other));
    const ratio = median(r.base.seconds) / median(r.other.seconds);
    console.log(`  offpeak / direct: ${f2(ratio)}× (${verdict(ratio, 0.9)}); offpeak peak RSS ${f1(server.peakRssMb())} MB`);
  } finally {
    await server.stop();
  }
}

async function scenarioC(e: EngineReplicas): Promise<void> {
  const lines = Math.max(100, Math.round(LINES / 2));
  const w = noShared(lines);
  console.log(`\n(c) 1 → 2 replicas through offpeak, ${lines} lines with no shared prefix`);
  const one = e.baseUrls.slice(0, 1);
  const two = e.baseUrls.slice(0, 2);
  if (DIRECT_ONLY) {
    const r = await alternate(
      e,
      () => leastLoaded(one, w, SHAPE.maxRunning),
      () => leastLoaded(two, w, SHAPE.maxRunning),
    );
    console.log(sideLine("direct, 1 replica", lines, r.base));
    console.log(sideLine("direct, 2 replicas", lines, r.other));
    console.log(`  2 / 1: ${f2(median(r.base.seconds) / median(r.other.seconds))}× (the engine model's own scaling)`);
    return;
  }
  const s1 = await startOffpeak(one);
  const s2 = await startOffpeak(two);
  try {
    const [f1id, f2id] = [(await uploadBatchFile(s1.base, w.path)).id, (await uploadBatchFile(s2.base, w.path)).id];
    const r = await alternate(
      e,
      () => viaOffpeak(s1, f1id, lines),
      () => viaOffpeak(s2, f2id, lines),
    );
    console.log(sideLine("offpeak, 1 replica", lines, r.base));
    console.log(sideLine("offpeak, 2 replicas", lines, r.other));
    const ratio = median(r.base.seconds) / median(r.other.seconds);
    console.log(`  2 / 1: ${f2(ratio)}× (${verdict(ratio, 1.9)}); offpeak peak RSS ${f1(s1.peakRssMb())} / ${f1(s2.peakRssMb())} MB`);
  } finally {
    await s1.stop();
    await s2.stop();
  }
}

async function scenarioD(e: EngineReplicas): Promise<void> {
  const w = sharedPrefixes(LINES);
  const VICTIM = 1;
  console.log(`\n(d) 4 replicas, ${LINES} lines as in (a); replica ${VICTIM} killed once 40% of the lines are answered`);
  if (DIRECT_ONLY) {
    console.log("  (offpeak only: skipped with --direct-only)");
    return;
  }
  const server = await startOffpeak(e.baseUrls);
  try {
    const file = await uploadBatchFile(server.base, w.path);
    for (let run = 0; run < RUNS; run++) {
      e.reset();
      const samples: { t: number; answered: number }[] = [];
      let killAt = NaN;
      let held = 0;
      const { seconds, batch } = await offpeakBatch(server, file.id, async (b) => {
        for (;;) {
          const now = performance.now();
          const answered = e.total().answered;
          samples.push({ t: now, answered });
          if (Number.isNaN(killAt) && answered >= 0.4 * LINES) {
            killAt = now;
            held = await e.replicas[VICTIM]!.kill();
          }
          if (TERMINAL.includes((await getBatch(server, b.id)).status)) return;
          await Bun.sleep(100);
        }
      });
      const t = e.total();
      // Answers a second over the second before `at` (the samples are 100 ms or so apart).
      const rateAt = (at: number) => {
        const end = samples.findLast((s) => s.t <= at);
        const start = samples.findLast((s) => s.t <= at - 1000);
        return end && start && end.t > start.t ? ((end.answered - start.answered) * 1000) / (end.t - start.t) : NaN;
      };
      const before = rateAt(killAt);
      const back = samples.find((s) => s.t > killAt + 1000 && rateAt(s.t) >= 0.75 * before);
      await e.replicas[VICTIM]!.restart();
      console.log(
        `  run ${run + 1}: ${batch.status} in ${f2(seconds)} s; failed lines ${batch.request_counts.failed} (must be 0); resent ${t.seen - LINES} (requests received ${t.seen} − ${LINES} lines) against ${held} held by replica ${VICTIM} at the kill; ` +
          `rate before the kill ${f1(before)}/s, back to ≥ 3/4 of it ${back ? `${f2((back.t - killAt) / 1000)} s after the kill` : "never before the end"}; cache hits ${pct(hitRate(e))}`,
      );
    }
    console.log(`  offpeak peak RSS ${f1(server.peakRssMb())} MB`);
  } finally {
    await server.stop();
  }
}

async function scenarioE(e: EngineReplicas): Promise<void> {
  const w = sharedPrefixes(Math.max(LINES, 1000));
  const N = 30;
  const chat = (i: number) => JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `Interactive question ${i}: what time is it?` }], max_tokens: 16 });
  const alone = workOf(SHAPE, prefixOf(JSON.parse(chat(0)), SHAPE), false);
  console.log(`\n(e) interactive chat completions through offpeak, one at a time (${N} a run; work ${f1(alone)} ms alone), unloaded and while a batch of ${w.bodies.length} lines fills every replica`);
  if (DIRECT_ONLY) {
    console.log("  (offpeak only: skipped with --direct-only)");
    return;
  }
  const server = await startOffpeak(e.baseUrls);
  const sequential = async (tag: string): Promise<number[]> => {
    const xs: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const res = await fetch(`${server.base}/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: chat(i) });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`interactive ${tag} ${i}: ${res.status}`);
      xs.push(performance.now() - t0);
    }
    return xs.sort((a, b) => a - b);
  };
  try {
    const file = await uploadBatchFile(server.base, w.path);
    await sequential("warm-up");
    const unloaded: number[] = [];
    const loaded: number[] = [];
    const full: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      const measure = async (which: "unloaded" | "loaded") => {
        e.reset();
        if (which === "unloaded") {
          const xs = await sequential(which);
          unloaded.push(median(xs));
          return;
        }
        const b = await createBatch(server, file.id);
        // Every replica's batch full (or the batch nearly done: then the figure says so).
        for (let i = 0; i < 600 && !e.stats().every((s) => s.running >= SHAPE.maxRunning); i++) await Bun.sleep(50);
        let fullSamples = 0;
        let samples = 0;
        let stop = false;
        const sampling = (async () => {
          for (let i = 0; i < 10_000 && !stop; i++) {
            samples++;
            if (e.stats().every((s) => s.running >= SHAPE.maxRunning)) fullSamples++;
            await Bun.sleep(50);
          }
        })();
        const xs = await sequential(which);
        stop = true;
        await sampling;
        const status = (await getBatch(server, b.id)).status;
        if (status !== "in_progress") console.log(`  (the batch was ${status} before the interactive requests were done: use more --lines)`);
        await fetch(`${server.base}/batches/${b.id}/cancel`, { method: "POST", headers: auth });
        for (let i = 0; i < 600 && !TERMINAL.includes((await getBatch(server, b.id)).status); i++) await Bun.sleep(100);
        for (let i = 0; i < 600 && e.total().inFlight > 0; i++) await Bun.sleep(50);
        loaded.push(median(xs));
        full.push(samples ? fullSamples / samples : NaN);
        console.log(`  run ${run + 1} loaded: p50 ${f1(median(xs))} ms, p90 ${f1(percentile(xs, 90))} ms; every replica's batch full ${pct(full.at(-1)!)} of the time`);
      };
      const order: ("unloaded" | "loaded")[] = run % 2 ? ["loaded", "unloaded"] : ["unloaded", "loaded"];
      for (const which of order) await measure(which);
    }
    const ratio = median(loaded) / median(unloaded);
    console.log(`  unloaded p50 ${f1(median(unloaded))} ms, loaded p50 ${f1(median(loaded))} ms: ${f2(ratio)}× (${verdict(ratio, 1.5, false)}); offpeak peak RSS ${f1(server.peakRssMb())} MB`);
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------- main

const engines = await startEngineReplicas(4, SHAPE, { models: [MODEL] });
try {
  console.log(`machine: ${machineNote()}; load ${loadAverage()}`);
  const sample = workOf(SHAPE, { prefixChars: PREFIX_CHARS, restChars: 100 }, false);
  console.log(
    `engine replicas: 4, each a batch of ${SHAPE.maxRunning}${SHAPE.preempt ? " (preempting by priority)" : ""}, ${SHAPE.cachePrefixes} prefixes cached; work ${SHAPE.decodeMs} ms decode + ${SHAPE.prefillMsPerKChar} ms per 1000 prompt characters, ${pct(SHAPE.hitSaving)} of a cached prefix's saved ` +
      `(a ${PREFIX_CHARS}-character system prompt: ${f1(sample)} ms on a miss, ${f1(workOf(SHAPE, { prefixChars: PREFIX_CHARS, restChars: 100 }, true))} ms on a hit; a replica full of misses answers ${f1(replicaThroughput(SHAPE, sample))}/s)`,
  );
  console.log(
    `offpeak: ${DIRECT_ONLY ? "not run (--direct-only)" : `one upstream, engine vllm, replicas [...], max_concurrency ${CONCURRENCY} (each replica), batch_priority ${BATCH_PRIORITY}${WORKERS ? `, ${WORKERS} batch Workers` : ""}`}; ${RUNS} run(s), medians`,
  );
  const scenarios: [string, (e: EngineReplicas) => Promise<void>][] = [
    ["a", scenarioA],
    ["b", scenarioB],
    ["c", scenarioC],
    ["d", scenarioD],
    ["e", scenarioE],
  ];
  for (const [name, fn] of scenarios)
    if (ONLY.has(name))
      try {
        await fn(engines);
      } catch (err) {
        process.exitCode = 1;
        console.log(`  (${name}) failed: ${err instanceof Error ? err.message : String(err)}`);
      }
} finally {
  await engines.stop();
  for (const name of ["shared", "unique"]) rmSync(`/tmp/offpeak-replicas-${process.pid}-${name}.jsonl`, { force: true });
}

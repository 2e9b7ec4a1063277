// Following batches (docs/CONTRACT.md §12): three measurements, selectable by flag.
//
//   --watchers  1,000 SSE watchers (GET /batches/{id}/events) on one running
//               1M-line offpeak-echo batch: create → completed with them vs
//               without (alternating runs, a fresh server each), server RSS,
//               and every watcher receiving the final record.
//   --retry     POST /batches/{id}/retry on a completed 1M-line batch with
//               100,000 failed lines (every 10th line has "n": 0, which
//               offpeak-echo refuses with a 400): time to the answer, peak RSS
//               during it, and the new input file checked line by line. The
//               baseline is the same work done by one thread of this process
//               (no server): read the error file's ids, stream the input, write
//               the matching lines.
//   --webhooks  10,000 pending webhook deliveries (rows inserted directly into
//               webhook_events) to a receiver that answers after 1 s, while a
//               client sends a chat completion on offpeak-echo every 10 ms:
//               interactive latency with the backlog draining vs without
//               (alternating phases), the time to deliver all, and exactness.
//
// No section flag: all three. --quick: a small smoke run of each.
// Options: --lines N (1M)  --runs N (watcher runs of each kind, 2)  --clients N
// (watchers, 1000)  --retries N (3)  --events N (10000)  --rounds N (2)
// --phase-s S (seconds of each phase without a backlog, 20)
// --server-bun-args "…" (extra Bun flags for the server, e.g. a CPU profile)
//
// Every process is a separate Bun process: the server (so its RSS is its own),
// the watchers, the webhook receiver and the latency client are this same
// file run with `--role …`. Server data dirs live under bench/data/ and are
// removed after each server stops. Run it under the shared lock:
//   flock /tmp/offpeak-bench.lock bun bench/follow.ts
import { Database } from "bun:sqlite";
import { createHmac } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { generateBatchFile } from "./gen-batch";
import { ROOT, freePort, loadAverage, machineNote, median, percentile, rssMb, peakRssMb, settleDisk, spawnBun, waitForHttp, type Child, cpuSeconds, resetPeakRss } from "./lib";
import { BENCH_KEY } from "./server";
import { readLines } from "../src/jsonl/lineReader";

const auth = { authorization: `Bearer ${BENCH_KEY}` };
const now = () => performance.timeOrigin + performance.now(); // ms, comparable across processes
const FINAL = ["completed", "failed", "expired", "cancelled"];

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const flag = (name: string) => process.argv.includes(name);
const num = (name: string, dflt: number) => (arg(name) === undefined ? dflt : Number(arg(name)));

interface BatchRecord {
  id: string;
  status: string;
  input_file_id: string;
  output_file_id: string | null;
  error_file_id: string | null;
  metadata: Record<string, string> | null;
  request_counts: { total: number; completed: number; failed: number };
}

// ---------------------------------------------------------------------------
// Child roles (this file run with --role X)
// ---------------------------------------------------------------------------

/** Reads the first line of stdin. */
async function stdinLine(): Promise<string> {
  let buf = "";
  for await (const chunk of Bun.stdin.stream()) {
    buf += new TextDecoder().decode(chunk);
    const i = buf.indexOf("\n");
    if (i >= 0) return buf.slice(0, i);
  }
  return buf;
}

/**
 * N concurrent SSE watchers of one batch. Prints "ready", reads the batch id
 * from stdin, opens every stream at once, prints "connected <ms>" when every
 * watcher has its first event, and a JSON summary when every stream has ended.
 * (Needs BUN_CONFIG_MAX_HTTP_REQUESTS above N: Bun's fetch runs 256 at once by default.)
 */
async function roleWatchers(base: string, n: number): Promise<void> {
  console.log("ready");
  const id = (await stdinLine()).trim();
  const t0 = now();
  let connected = 0;
  let open = 0;
  let maxOpen = 0;
  const decoder = new TextDecoder();
  const results = await Promise.all(
    Array.from({ length: n }, async () => {
      const r = { events: 0, final: false, finalCompleted: -1, backwards: 0, error: null as string | null, keepAlives: 0 };
      try {
        const res = await fetch(`${base}/batches/${id}/events`, { headers: auth });
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
        open++;
        maxOpen = Math.max(maxOpen, open);
        let buf = "";
        let last: BatchRecord | null = null;
        for await (const chunk of res.body!) {
          buf += decoder.decode(chunk, { stream: true });
          let end: number;
          while ((end = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, end);
            buf = buf.slice(end + 2);
            if (block.startsWith(":")) {
              r.keepAlives++;
              continue;
            }
            const data = block.split("\n").find((l) => l.startsWith("data: "));
            if (!data) continue;
            const b = JSON.parse(data.slice(6)) as BatchRecord;
            if (r.events === 0 && ++connected === n) console.log(`connected ${(now() - t0).toFixed(0)}`);
            r.events++;
            if (last && (b.request_counts.completed < last.request_counts.completed || b.request_counts.failed < last.request_counts.failed)) r.backwards++;
            last = b;
          }
        }
        open--;
        r.final = last !== null && FINAL.includes(last.status);
        r.finalCompleted = last?.status === "completed" ? last.request_counts.completed : -1;
      } catch (e) {
        r.error = String((e as Error).message ?? e);
      }
      return r;
    }),
  );
  const events = results.map((r) => r.events).sort((a, b) => a - b);
  const errors = results.filter((r) => r.error).map((r) => r.error!);
  console.log(
    "result " +
      JSON.stringify({
        watchers: n,
        connected,
        maxOpen,
        gotFinal: results.filter((r) => r.final).length,
        gotCompleted: results.filter((r) => r.finalCompleted >= 0).length,
        finalCompletedCounts: [...new Set(results.map((r) => r.finalCompleted))],
        backwards: results.reduce((a, r) => a + r.backwards, 0),
        keepAlives: results.reduce((a, r) => a + r.keepAlives, 0),
        events: { min: events[0], median: median(events), max: events.at(-1) },
        errors: errors.length,
        firstError: errors[0] ?? null,
        seconds: (now() - t0) / 1000,
        cpuSeconds: (process.cpuUsage().user + process.cpuUsage().system) / 1e6,
      }),
  );
  process.exit(0);
}

/**
 * A webhook receiver that answers 200 after `delayMs`. Counts requests and
 * distinct webhook-ids, checks each signature (once given the secret through
 * POST /secret), and tells all through GET /stats. Prints its port.
 */
function roleReceiver(delayMs: number): void {
  let secret: Buffer | null = null;
  const seen = new Set<string>();
  let requests = 0;
  let badSignature = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  let lastNewAt = 0;
  let firstAt = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 30,
    async fetch(req) {
      const url = new URL(req.url);
      if (url.pathname === "/stats") return Response.json({ requests, distinct: seen.size, badSignature, maxInFlight, firstAt, lastNewAt, ids: url.searchParams.has("ids") ? [...seen] : undefined });
      if (url.pathname === "/secret") {
        secret = Buffer.from((await req.text()).slice("whsec_".length), "base64");
        return new Response("ok");
      }
      if (url.pathname === "/reset") {
        seen.clear();
        requests = badSignature = maxInFlight = lastNewAt = firstAt = 0;
        return new Response("ok");
      }
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        const body = await req.text();
        const id = req.headers.get("webhook-id") ?? "";
        const ts = req.headers.get("webhook-timestamp") ?? "";
        const sig = req.headers.get("webhook-signature") ?? "";
        requests++;
        if (!firstAt) firstAt = now();
        if (secret) {
          const want = "v1," + createHmac("sha256", secret).update(`${id}.${ts}.${body}`).digest("base64");
          if (sig !== want || JSON.parse(body).id !== id) badSignature++;
        }
        if (!seen.has(id)) {
          seen.add(id);
          lastNewAt = now();
        }
        await Bun.sleep(delayMs);
        return new Response("ok");
      } finally {
        inFlight--;
      }
    },
  });
  console.log(`port ${server.port}`);
}

/**
 * Interactive client: one non-streaming chat completion on offpeak-echo every
 * `intervalMs` (open loop: sent on schedule whether or not earlier ones have
 * answered), until stdin closes; then prints every sample as JSON
 * ([sentAt (ms, absolute), latency ms, status]).
 */
async function roleLatency(base: string, intervalMs: number): Promise<void> {
  const body = JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
  const headers = { ...auth, "content-type": "application/json" };
  const samples: [number, number, number][] = [];
  let stop = false;
  void (async () => {
    for await (const _ of Bun.stdin.stream()) {
    }
    stop = true;
  })();
  const inflight = new Set<Promise<void>>();
  const t0 = now();
  for (let k = 0; !stop; k++) {
    const due = t0 + k * intervalMs;
    const wait = due - now();
    if (wait > 0) await Bun.sleep(wait);
    const sent = now();
    const p: Promise<void> = fetch(`${base}/chat/completions`, { method: "POST", headers, body })
      .then(async (res) => {
        await res.arrayBuffer();
        samples.push([sent, now() - sent, res.status]);
      })
      .catch(() => void samples.push([sent, now() - sent, 0]))
      .finally(() => inflight.delete(p));
    inflight.add(p);
  }
  await Promise.all(inflight);
  console.log(JSON.stringify(samples));
}

// ---------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------

let serverSeq = 0;
interface Server {
  child: Child;
  pid: number;
  base: string;
  dataDir: string;
  stop(): Promise<void>;
}

async function startServer(config?: unknown): Promise<Server> {
  const dataDir = join(ROOT, "bench/data", `follow-${process.pid}-${serverSeq++}`);
  rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true });
  const port = freePort();
  // --server-bun-args "…": extra Bun flags for the server (e.g. "--cpu-prof-md --cpu-prof-dir=/tmp/prof").
  const extra = (arg("--server-bun-args") ?? "").split(" ").filter(Boolean);
  const args = [...extra, "src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir];
  if (config) {
    writeFileSync(join(dataDir, "config.json"), JSON.stringify(config));
    args.push("--config", join(dataDir, "config.json"));
  }
  const child = spawnBun(args, {
    env: { OFFPEAK_ADMIN_KEY: BENCH_KEY, OFFPEAK_LOG_LEVEL: "warn" },
  });
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    child.assertRuns("src/main.ts");
  } catch (e) {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  return {
    child,
    pid: child.pid,
    base: `http://127.0.0.1:${port}/api/v1`,
    dataDir,
    async stop() {
      await child.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function api<T>(s: Server, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${s.base}${path}`, {
    method,
    headers: body === undefined ? auth : { ...auth, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${(await res.text()).slice(0, 300)}`);
  return (await res.json()) as T;
}

async function upload(s: Server, path: string): Promise<{ id: string; bytes: number }> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(path), "input.jsonl");
  const res = await fetch(`${s.base}/files`, { method: "POST", headers: auth, body: form });
  if (!res.ok) throw new Error(`upload failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as { id: string; bytes: number };
}

const createBatch = (s: Server, fileId: string, metadata?: Record<string, string>) =>
  api<BatchRecord>(s, "POST", "/batches", { input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h", metadata });

/** Polls GET /batches/{id} every `everyMs` until a final state; calls `sample` after each poll. */
async function waitFinal(s: Server, id: string, everyMs = 20, sample?: () => void): Promise<BatchRecord> {
  for (;;) {
    const b = await api<BatchRecord>(s, "GET", `/batches/${id}`);
    sample?.();
    if (FINAL.includes(b.status)) return b;
    await Bun.sleep(everyMs);
  }
}

/** Streams a file's content line by line (the callback gets each non-empty line). */
async function eachLineOf(s: Server, fileId: string, fn: (line: string) => void): Promise<void> {
  const res = await fetch(`${s.base}/files/${fileId}/content`, { headers: auth });
  if (!res.ok) throw new Error(`GET /files/${fileId}/content: HTTP ${res.status}`);
  for await (const lines of readLines(res.body!)) for (const { text } of lines) if (text) fn(text);
}

const resetPeak = (pid: number) => {
  if (!resetPeakRss(pid)) throw new Error(`cannot reset the peak RSS of ${pid} (/proc/${pid}/clear_refs)`);
};

const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);
const int = (x: number) => Math.round(x).toLocaleString("en-US");

// ---------------------------------------------------------------------------
// 1. SSE watchers
// ---------------------------------------------------------------------------

interface WatchRun {
  kind: "without" | "with";
  seconds: number;
  status: string;
  completed: number;
  rssAtCreate: number;
  rssAtConnected: number | null;
  connectedAfterMs: number | null;
  /** VmRSS sampled at every poll: [ms after create, MB]. */
  series: [number, number][];
  peak: number;
  rssAfterUpload: number;
  watchers: Record<string, unknown> | null;
  clientCpu: number | null;
  /** Server CPU seconds from create to completed (all threads: the batch Workers, the HTTP thread). */
  serverCpu: number;
}

async function watchersSection(input: string, lines: number, runs: number, clients: number): Promise<boolean> {
  console.log(`\n## 1. ${clients} SSE watchers on one running ${int(lines)}-line offpeak-echo batch (${runs} runs each, alternating; fresh server per run)`);
  await generateBatchFile(input, lines);
  const results: WatchRun[] = [];
  let ok = true;
  for (let i = 0; i < 2 * runs; i++) {
    const kind = i % 2 === 0 ? "without" : "with";
    const s = await startServer();
    let client: Bun.Subprocess<"pipe", "pipe", "inherit"> | null = null;
    try {
      const file = await upload(s, input);
      settleDisk();
      await Bun.sleep(500);
      const rssAfterUpload = rssMb(s.pid);
      let out: AsyncIterator<string> | null = null;
      if (kind === "with") {
        client = Bun.spawn([process.execPath, import.meta.path, "--role", "watchers", s.base, String(clients)], {
          cwd: ROOT,
          stdin: "pipe",
          stdout: "pipe",
          stderr: "inherit",
          env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: String(Math.max(clients * 2, 512)) },
        });
        out = linesOf(client.stdout);
        const ready = await out.next();
        if (ready.value !== "ready") throw new Error(`watcher client said '${ready.value}'`);
      }
      const cpu0 = client ? cpuSeconds(client.pid) : 0;
      const serverCpu0 = cpuSeconds(s.pid);
      const t0 = performance.now();
      const created = await createBatch(s, file.id);
      const rssAtCreate = rssMb(s.pid);
      let connectedAfterMs: number | null = null;
      let rssAtConnected: number | null = null;
      let summary: Promise<Record<string, unknown>> | null = null;
      if (client && out) {
        client.stdin.write(created.id + "\n");
        client.stdin.flush();
        const o = out;
        summary = (async () => {
          for (;;) {
            const { value, done } = await o.next();
            if (done) throw new Error("watcher client ended without a result");
            if (value.startsWith("connected ")) {
              connectedAfterMs = performance.now() - t0;
              rssAtConnected = rssMb(s.pid);
            } else if (value.startsWith("result ")) return JSON.parse(value.slice(7)) as Record<string, unknown>;
          }
        })();
      }
      const series: [number, number][] = [];
      const b = await waitFinal(s, created.id, 20, () => series.push([performance.now() - t0, rssMb(s.pid)]));
      const seconds = (performance.now() - t0) / 1000;
      const serverCpu = cpuSeconds(s.pid) - serverCpu0;
      const peak = peakRssMb(s.pid);
      let watchers: Record<string, unknown> | null = null;
      let clientCpu: number | null = null;
      if (client && summary) {
        watchers = await Promise.race([summary, Bun.sleep(30_000).then(() => ({ error: "no result within 30 s of completion" }))]);
        // The client's own CPU since it was told the batch id (it reports its total as it ends).
        if (typeof watchers.cpuSeconds === "number") clientCpu = watchers.cpuSeconds - cpu0;
      }
      const run: WatchRun = { kind, seconds, status: b.status, completed: b.request_counts.completed, rssAtCreate, rssAtConnected, connectedAfterMs, series, peak, rssAfterUpload, watchers, clientCpu, serverCpu };
      results.push(run);
      const w = watchers as { gotCompleted?: number; connected?: number; maxOpen?: number; errors?: number; backwards?: number; finalCompletedCounts?: number[]; events?: { median: number } } | null;
      console.log(
        `  run ${i + 1} ${kind.padEnd(7)}: create → ${b.status} ${f2(seconds)} s (${int(b.request_counts.completed)}/${int(b.request_counts.total)}), server CPU ${f2(serverCpu)} s, ` +
          `RSS after upload ${f1(rssAfterUpload)} MB, at create ${f1(rssAtCreate)} MB` +
          (rssAtConnected !== null ? `, all connected after ${f1(connectedAfterMs!)} ms at ${f1(rssAtConnected)} MB` : "") +
          `, peak (VmHWM) ${f1(peak)} MB` +
          (w
            ? `; watchers: ${w.connected} connected (${w.maxOpen} open at once), ${w.gotCompleted} got the final 'completed' record (completed in it: ${w.finalCompletedCounts?.join(", ")}), ${w.errors} errors, ${w.backwards} counts going back, median ${w.events?.median} events each, client CPU ${clientCpu === null ? "?" : f2(clientCpu)} s`
            : "") +
          `; load ${loadAverage()}`,
      );
      if (b.status !== "completed" || b.request_counts.completed !== lines) ok = false;
      if (kind === "with" && (w?.gotCompleted !== clients || w?.errors !== 0 || w?.backwards !== 0 || w?.finalCompletedCounts?.join() !== String(lines))) {
        ok = false;
        console.log(`  !! watcher summary: ${JSON.stringify(watchers)}`);
      }
    } finally {
      client?.kill();
      await client?.exited;
      await s.stop();
    }
  }
  ok = (await watchersAlone(clients)) && ok;
  const by = (k: string) => results.filter((r) => r.kind === k);
  const without = by("without");
  const withW = by("with");
  const tWithout = median(without.map((r) => r.seconds));
  const tWith = median(withW.map((r) => r.seconds));
  // RSS of the without-runs at the moment the watchers were all connected in the with-runs (same time after create).
  const atOffset = (r: WatchRun, ms: number) => {
    let best = r.series[0];
    for (const p of r.series) if (p[0] <= ms) best = p;
    return best?.[1] ?? NaN;
  };
  const connectMs = median(withW.map((r) => r.connectedAfterMs ?? NaN));
  const growthWith = withW.map((r) => r.peak - r.rssAtCreate);
  const growthWithout = without.map((r) => r.peak - r.rssAtCreate);
  console.log(
    `  server CPU create → completed: without ${without.map((r) => f2(r.serverCpu)).join(", ")} s (median ${f2(median(without.map((r) => r.serverCpu)))}); with ${withW.map((r) => f2(r.serverCpu)).join(", ")} s (median ${f2(median(withW.map((r) => r.serverCpu)))}); watcher client CPU ${withW.map((r) => f2(r.clientCpu ?? NaN)).join(", ")} s`,
  );
  console.log(`  create → completed: without ${without.map((r) => f2(r.seconds)).join(", ")} s (median ${f2(tWithout)}); with ${withW.map((r) => f2(r.seconds)).join(", ")} s (median ${f2(tWith)}) → ratio ${f2(tWith / tWithout)}× (target ≤ 1.1×)`);
  console.log(
    `  RSS: VmRSS at create → peak: with watchers +${growthWith.map(f1).join(", +")} MB (median +${f1(median(growthWith))}), without +${growthWithout.map(f1).join(", +")} MB (median +${f1(median(growthWithout))}); ` +
      `peak with ${f1(median(withW.map((r) => r.peak)))} vs without ${f1(median(without.map((r) => r.peak)))} MB (medians) → the watchers' part ≈ ${f1(median(withW.map((r) => r.peak)) - median(without.map((r) => r.peak)))} MB (target ≤ 50 MB)`,
  );
  console.log(
    `  VmRSS ${f1(connectMs)} ms after create (all watchers connected): with ${withW.map((r) => f1(r.rssAtConnected ?? NaN)).join(", ")} MB vs without ${without.map((r) => f1(atOffset(r, connectMs))).join(", ")} MB; at create: with ${withW.map((r) => f1(r.rssAtCreate)).join(", ")}, without ${without.map((r) => f1(r.rssAtCreate)).join(", ")} MB`,
  );
  return ok;
}

/**
 * The watchers' own cost, apart from the batch's: a batch that runs slowly
 * (offpeak-echo at 200 ms a line, 4 at once: its counts change all the time,
 * its memory hardly moves), 10 s without watchers, then `clients` watchers
 * connect and stream for 10 s; then the batch is cancelled and every watcher
 * must get the final 'cancelled' record.
 */
async function watchersAlone(clients: number): Promise<boolean> {
  const lines = 2000;
  const input = join(ROOT, "bench/data", `batch-${lines}.jsonl`);
  await generateBatchFile(input, lines);
  const s = await startServer({ models: { "offpeak-echo": { latency_ms: 200, max_concurrency: 4 } } });
  let client: Bun.Subprocess<"pipe", "pipe", "inherit"> | null = null;
  try {
    const file = await upload(s, input);
    const created = await createBatch(s, file.id);
    for (let b = created; b.status !== "in_progress"; b = await api<BatchRecord>(s, "GET", `/batches/${created.id}`)) await Bun.sleep(100);
    client = Bun.spawn([process.execPath, import.meta.path, "--role", "watchers", s.base, String(clients)], {
      cwd: ROOT,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
      env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: String(Math.max(clients * 2, 512)) },
    });
    const out = linesOf(client.stdout);
    if ((await out.next()).value !== "ready") throw new Error("watcher client not ready");
    await Bun.sleep(2000);
    // 10 s without watchers.
    resetPeak(s.pid);
    let cpu = cpuSeconds(s.pid);
    await Bun.sleep(10_000);
    const cpuWithout = cpuSeconds(s.pid) - cpu;
    const peakWithout = peakRssMb(s.pid);
    const rssBefore = rssMb(s.pid);
    // The watchers connect, then 10 s of events.
    resetPeak(s.pid);
    cpu = cpuSeconds(s.pid);
    const t0 = performance.now();
    client.stdin.write(created.id + "\n");
    client.stdin.flush();
    const connected = await out.next();
    const connectMs = performance.now() - t0;
    const rssConnected = rssMb(s.pid);
    const cpuConnect = cpuSeconds(s.pid) - cpu;
    await Bun.sleep(Math.max(0, 10_000 - connectMs));
    const cpuWith = cpuSeconds(s.pid) - cpu;
    const rssAfter = rssMb(s.pid);
    const peakWith = peakRssMb(s.pid);
    await api(s, "POST", `/batches/${created.id}/cancel`);
    let result: Record<string, any> = {};
    for (;;) {
      const { value, done } = await out.next();
      if (done) break;
      if (value.startsWith("result ")) {
        result = JSON.parse(value.slice(7));
        break;
      }
    }
    const final = await api<BatchRecord>(s, "GET", `/batches/${created.id}`);
    console.log(
      `  watchers alone (a batch trickling at ≈20 lines/s, ${clients} watchers): VmRSS before ${f1(rssBefore)} MB, all connected (${connected.value}; ${f1(connectMs)} ms) ${f1(rssConnected)} MB, after 10 s of events ${f1(rssAfter)} MB; ` +
        `peak (VmHWM, reset at each start) without watchers ${f1(peakWithout)} MB, with ${f1(peakWith)} MB → growth ${f1(peakWith - rssBefore)} MB over VmRSS before (target ≤ 50 MB); ` +
        `server CPU over 10 s: without ${f2(cpuWithout)} s, with ${f2(cpuWith)} s (of which connecting ${f2(cpuConnect)} s); ${result.gotFinal}/${clients} got the final '${final.status}' record, ${result.errors} errors, median ${result.events?.median} events each`,
    );
    return result.gotFinal === clients && result.errors === 0 && final.status === "cancelled";
  } finally {
    client?.kill();
    await client?.exited;
    await s.stop();
  }
}

/** Lines of a child's stdout. */
async function* linesOf(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of stream) {
    buf += decoder.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      yield buf.slice(0, i);
      buf = buf.slice(i + 1);
    }
  }
  if (buf) yield buf;
}

// ---------------------------------------------------------------------------
// 2. Retry
// ---------------------------------------------------------------------------

/** Every `every`-th line (1-based) of the plain batch file gets "n": 0 in its body: offpeak-echo answers it with a 400. */
async function generateRetryFile(plain: string, path: string, lines: number, every = 10): Promise<void> {
  const marker = `${path}.meta.json`;
  try {
    const m = JSON.parse(readFileSync(marker, "utf8"));
    if (m.lines === lines && m.every === every && m.bytes === statSync(path).size && m.source === statSync(plain).size) return;
  } catch {}
  await generateBatchFile(plain, lines);
  rmSync(marker, { force: true });
  const fd = openSync(`${path}.tmp`, "w");
  let i = 0;
  let bytes = 0;
  try {
    for await (const batch of readLines(Bun.file(plain).stream())) {
      let out = "";
      for (const { text } of batch) {
        if (!text) continue;
        i++;
        if (i % every === 0) {
          if (!text.endsWith('"max_tokens":64}}')) throw new Error(`line ${i} does not end as expected`);
          out += text.slice(0, -2) + ',"n":0}}\n';
        } else out += text + "\n";
      }
      const buf = Buffer.from(out);
      writeSync(fd, buf);
      bytes += buf.length;
    }
  } finally {
    closeSync(fd);
  }
  renameSync(`${path}.tmp`, path);
  writeFileSync(marker, JSON.stringify({ lines, every, bytes, source: statSync(plain).size }) + "\n");
}

/** The baseline: the retry's work in one thread of this process, no server: ids from the error file, then the matching input lines written out. */
async function retryFloor(errorPath: string, inputPath: string, outPath: string): Promise<{ seconds: number; lines: number }> {
  const t0 = performance.now();
  const failed = new Set<string>();
  for await (const batch of readLines(Bun.file(errorPath).stream())) for (const { text } of batch) if (text) failed.add((JSON.parse(text) as { custom_id: string }).custom_id);
  const fd = openSync(outPath, "w");
  let found = 0;
  for await (const batch of readLines(Bun.file(inputPath).stream())) {
    let out = "";
    for (const { text } of batch) {
      if (!text) continue;
      if (failed.delete((JSON.parse(text) as { custom_id: string }).custom_id)) {
        out += text + "\n";
        found++;
      }
    }
    if (out) writeSync(fd, out);
    if (failed.size === 0) break;
  }
  closeSync(fd);
  return { seconds: (performance.now() - t0) / 1000, lines: found };
}

async function retrySection(plain: string, lines: number, retries: number): Promise<boolean> {
  const every = 10;
  const input = join(ROOT, "bench/data", `retry-${lines}.jsonl`);
  await generateRetryFile(plain, input, lines, every);
  const expectFailed = Math.floor(lines / every);
  console.log(`\n## 2. Retry of a ${int(lines)}-line batch with ${int(expectFailed)} failed lines ("n": 0 on every ${every}th line; ${f1(statSync(input).size / 1e6)} MB)`);
  // The original text of every failing line, by custom_id, to check the new input file against.
  const want = new Map<string, string>();
  let i = 0;
  for await (const batch of readLines(Bun.file(input).stream()))
    for (const { text } of batch) if (text && ++i % every === 0) want.set((JSON.parse(text) as { custom_id: string }).custom_id, text);
  let ok = true;
  const s = await startServer();
  try {
    const file = await upload(s, input);
    const t0 = performance.now();
    const created = await createBatch(s, file.id, { bench: "retry" });
    const b = await waitFinal(s, created.id, 50);
    console.log(`  original batch: ${b.status} in ${f2((performance.now() - t0) / 1000)} s, ${int(b.request_counts.completed)} completed, ${int(b.request_counts.failed)} failed (expected ${int(expectFailed)})`);
    if (b.status !== "completed" || b.request_counts.failed !== expectFailed) ok = false;
    // The baseline reads the same two files from disk (the error file downloaded first, not timed).
    const errCopy = join(ROOT, "bench/data", `retry-errors-${process.pid}.jsonl`);
    const floorOut = join(ROOT, "bench/data", `retry-floor-${process.pid}.jsonl`);
    await Bun.write(errCopy, await fetch(`${s.base}/files/${b.error_file_id}/content`, { headers: auth }));
    const times: number[] = [];
    const floors: number[] = [];
    const peaks: number[] = [];
    const idles: number[] = [];
    try {
      for (let r = 0; r < retries; r++) {
        // Alternate: the baseline, then the retry (order reversed every other round).
        const doFloor = async () => {
          const f = await retryFloor(errCopy, input, floorOut);
          if (f.lines !== expectFailed) ok = false;
          floors.push(f.seconds);
        };
        const doRetry = async () => {
          settleDisk();
          Bun.gc(true);
          await Bun.sleep(1000);
          const idle = rssMb(s.pid);
          resetPeak(s.pid);
          let sampled = 0;
          const sampler = setInterval(() => (sampled = Math.max(sampled, rssMb(s.pid))), 10);
          const t = performance.now();
          const nb = await api<BatchRecord>(s, "POST", `/batches/${b.id}/retry`).finally(() => clearInterval(sampler));
          const seconds = (performance.now() - t) / 1000;
          const peak = peakRssMb(s.pid);
          times.push(seconds);
          peaks.push(peak);
          idles.push(idle);
          // Check the new input file: exactly the failed lines, each as it was, each once.
          let got = 0;
          let wrong = 0;
          const seen = new Set<string>();
          await eachLineOf(s, nb.input_file_id, (line) => {
            got++;
            const id = (JSON.parse(line) as { custom_id: string }).custom_id;
            if (want.get(id) !== line || seen.has(id)) wrong++;
            seen.add(id);
          });
          const exact = got === expectFailed && seen.size === expectFailed && wrong === 0 && nb.metadata?.retry_of === b.id;
          if (!exact) ok = false;
          console.log(
            `  retry ${r + 1}: answered in ${f2(seconds)} s (new batch ${nb.id}, ${nb.status}); server VmRSS before ${f1(idle)} MB, peak during ${f1(peak)} MB (VmHWM after a reset; 10 ms samples: ${f1(sampled)}); ` +
              `new input file: ${int(got)} lines, ${int(seen.size)} distinct ids, ${wrong} not matching the original line, metadata.retry_of ${nb.metadata?.retry_of === b.id ? "ok" : "WRONG"} → ${exact ? "exact" : "NOT EXACT"}`,
          );
          // Let the new batch (every line fails again) finish before the next round.
          await waitFinal(s, nb.id, 50);
        };
        if (r % 2 === 0) {
          await doFloor();
          await doRetry();
        } else {
          await doRetry();
          await doFloor();
        }
        console.log(`    baseline (one thread, no server): ${f2(floors.at(-1)!)} s; load ${loadAverage()}`);
      }
    } finally {
      rmSync(errCopy, { force: true });
      rmSync(floorOut, { force: true });
    }
    console.log(
      `  retry answer: ${times.map(f2).join(", ")} s (median ${f2(median(times))}); baseline ${floors.map(f2).join(", ")} s (median ${f2(median(floors))}) → ${f2(median(times) / median(floors))}× the baseline; ` +
        `peak RSS during the retry ${peaks.map(f1).join(", ")} MB (max ${f1(Math.max(...peaks))}; target ≤ 256 MB), idle before ${f1(median(idles))} MB`,
    );
  } finally {
    await s.stop();
  }
  return ok;
}

// ---------------------------------------------------------------------------
// 3. Webhooks
// ---------------------------------------------------------------------------

function base62(n: number): string {
  const A = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  let s = "";
  const buf = new Uint8Array(n * 2);
  while (s.length < n) {
    crypto.getRandomValues(buf);
    for (let i = 0; i < buf.length && s.length < n; i++) if ((buf[i]! & 63) < 62) s += A[buf[i]! & 63];
  }
  return s;
}

/** Inserts `n` pending events for `endpointId` straight into the server's database (one transaction), as src/webhooks/outbox.ts writes them. */
function insertEvents(db: Database, endpointId: string, n: number): string[] {
  const ids: string[] = [];
  const ins = db.prepare(
    "INSERT INTO webhook_events (id, endpoint_id, type, payload, status, attempts, next_attempt_at, created_at) VALUES (?, ?, 'batch.completed', ?, 'pending', 0, ?, ?)",
  );
  const t = Date.now();
  db.transaction(() => {
    for (let i = 0; i < n; i++) {
      const id = `evt_${base62(24)}`;
      const payload = JSON.stringify({ id, object: "event", type: "batch.completed", created_at: Math.floor(t / 1000), data: { id: `batch_${base62(24)}` } });
      ins.run(id, endpointId, payload, t, Math.floor(t / 1000));
      ids.push(id);
    }
  })();
  return ids;
}

interface Phase {
  kind: "without" | "with";
  from: number;
  to: number;
  /** Server CPU seconds used in the phase. */
  cpu: number;
}

async function webhooksSection(events: number, rounds: number, phaseS: number): Promise<boolean> {
  console.log(`\n## 3. Webhook sender: ${int(events)} pending deliveries to a receiver that answers after 1 s, interactive chat (offpeak-echo) every 10 ms; ${rounds} rounds, phases without a backlog ${phaseS} s`);
  let ok = true;
  const s = await startServer();
  const receiver = Bun.spawn([process.execPath, import.meta.path, "--role", "receiver", "1000"], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
  let latency: Bun.Subprocess<"pipe", "pipe", "inherit"> | null = null;
  const db = new Database(join(s.dataDir, "offpeak.db"));
  try {
    db.exec("PRAGMA busy_timeout = 10000");
    const rout = linesOf(receiver.stdout);
    const port = Number((await rout.next()).value!.split(" ")[1]);
    const rbase = `http://127.0.0.1:${port}`;
    const ep = await api<{ id: string; secret: string }>(s, "POST", "/webhook_endpoints", { url: `${rbase}/hook` });
    await fetch(`${rbase}/secret`, { method: "POST", body: ep.secret });
    const stats = () => fetch(`${rbase}/stats`).then((r) => r.json() as Promise<{ requests: number; distinct: number; badSignature: number; maxInFlight: number; firstAt: number; lastNewAt: number }>);
    latency = Bun.spawn([process.execPath, import.meta.path, "--role", "latency", s.base, "10"], { cwd: ROOT, stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    const latencyOut = new Response(latency.stdout).text();
    await Bun.sleep(3000); // warm-up, not counted
    const phases: Phase[] = [];
    const drains: { seconds: number; requests: number; distinct: number; bad: number; maxInFlight: number; notDelivered: number; cpu: number; peak: number }[] = [];
    let allReceived = 0;
    const without = async () => {
      const from = now();
      const cpu0 = cpuSeconds(s.pid);
      await Bun.sleep(phaseS * 1000);
      phases.push({ kind: "without", from, to: now(), cpu: cpuSeconds(s.pid) - cpu0 });
    };
    await without();
    for (let r = 0; r < rounds; r++) {
      await fetch(`${rbase}/reset`, { method: "POST" });
      const cpu0 = cpuSeconds(s.pid);
      resetPeak(s.pid);
      const from = now();
      const ids = insertEvents(db, ep.id, events);
      const inserted = now();
      // Drained: every event delivered (the receiver has them all and the server has recorded every answer).
      let st = await stats();
      let pending = events;
      const deadline = performance.now() + Math.max(600_000, events * 100);
      for (;;) {
        await Bun.sleep(250);
        st = await stats();
        pending = (db.query("SELECT count(*) AS n FROM webhook_events WHERE status != 'delivered'").get() as { n: number }).n;
        if ((st.distinct >= events && pending === 0) || performance.now() > deadline) break;
      }
      const to = now();
      const cpu = cpuSeconds(s.pid) - cpu0;
      phases.push({ kind: "with", from, to, cpu });
      const peak = peakRssMb(s.pid);
      const seconds = (st.lastNewAt - inserted) / 1000;
      drains.push({ seconds, requests: st.requests, distinct: st.distinct, bad: st.badSignature, maxInFlight: st.maxInFlight, notDelivered: pending, cpu, peak });
      console.log(
        `  round ${r + 1}: ${int(events)} events inserted; all delivered after ${f1(seconds)} s (${f1(events / seconds)}/s), ${int(st.requests)} requests for ${int(st.distinct)} distinct webhook-ids, ` +
          `${st.badSignature} bad signatures, at most ${st.maxInFlight} at once at the receiver, ${pending} not 'delivered' in the db; server CPU ${f1(cpu)} s during the drain, peak RSS ${f1(peak)} MB; load ${loadAverage()}`,
      );
      if (st.distinct !== events || st.requests !== events || st.badSignature !== 0 || pending !== 0) ok = false;
      // The receiver's ids are exactly the inserted ones.
      const got = ((await fetch(`${rbase}/stats?ids`).then((x) => x.json())) as { ids: string[] }).ids;
      const idSet = new Set(ids);
      const foreign = got.filter((id) => !idSet.has(id)).length;
      if (foreign) {
        ok = false;
        console.log(`  !! ${foreign} webhook-ids the receiver got were not inserted`);
      }
      allReceived += got.length;
      await without();
    }
    // Every delivery once per event, and only the inserted events.
    const dup = (db.query("SELECT count(*) AS n FROM webhook_attempts").get() as { n: number }).n;
    const delivered = (db.query("SELECT count(*) AS n FROM webhook_events WHERE status = 'delivered' AND attempts = 1").get() as { n: number }).n;
    console.log(`  receiver: ${int(allReceived)} distinct webhook-ids over ${rounds} round(s), all of them inserted ones`);
    console.log(`  database: ${int(delivered)} events delivered on their first attempt, ${int(dup)} attempts recorded (expected ${int(events * rounds)} each)`);
    if (delivered !== events * rounds || dup !== events * rounds) ok = false;
    latency.stdin.end();
    const samples = JSON.parse(await latencyOut) as [number, number, number][];
    const errors = samples.filter((x) => x[2] !== 200).length;
    const stat = (ph: Phase) => {
      const xs = samples.filter((x) => x[0] >= ph.from && x[0] < ph.to).map((x) => x[1]).sort((a, b) => a - b);
      return { n: xs.length, p50: percentile(xs, 50), p99: percentile(xs, 99), max: xs.at(-1) ?? NaN };
    };
    const rows = phases.map((ph) => ({ ph, ...stat(ph) }));
    for (const r of rows) {
      const secs = (r.ph.to - r.ph.from) / 1000;
      console.log(`  ${r.ph.kind.padEnd(7)} backlog (${f1(secs)} s): n=${int(r.n)} p50 ${f2(r.p50)} ms p99 ${f2(r.p99)} ms max ${f1(r.max)} ms; server CPU ${f1((100 * r.ph.cpu) / secs)}% of a core`);
    }
    const med = (k: "without" | "with", f: "p50" | "p99") => median(rows.filter((r) => r.ph.kind === k).map((r) => r[f]));
    for (const k of ["without", "with"] as const) {
      const xs = samples.filter((x) => phases.some((ph) => ph.kind === k && x[0] >= ph.from && x[0] < ph.to)).map((x) => x[1]).sort((a, b) => a - b);
      console.log(`  ${k.padEnd(7)} backlog, all phases pooled: n=${int(xs.length)} p50 ${f2(percentile(xs, 50))} ms p99 ${f2(percentile(xs, 99))} ms p99.9 ${f2(percentile(xs, 99.9))} ms; over 10 ms: ${f2((100 * xs.filter((x) => x > 10).length) / xs.length)}%`);
    }
    console.log(
      `  interactive (medians over phases): without p50 ${f2(med("without", "p50"))} ms p99 ${f2(med("without", "p99"))} ms; with the backlog draining p50 ${f2(med("with", "p50"))} ms p99 ${f2(med("with", "p99"))} ms → p99 ${f2(med("with", "p99") / med("without", "p99"))}×; ${errors} errors of ${int(samples.length)} requests`,
    );
    console.log(`  time to deliver all ${int(events)}: ${drains.map((d) => f1(d.seconds)).join(", ")} s (median ${f1(median(drains.map((d) => d.seconds)))})`);
    if (errors) ok = false;
  } finally {
    latency?.kill();
    receiver.kill();
    db.close();
    await s.stop();
  }
  return ok;
}

// ---------------------------------------------------------------------------

async function main(): Promise<void> {
  const quick = flag("--quick");
  const lines = num("--lines", quick ? 20_000 : 1_000_000);
  const runs = num("--runs", quick ? 1 : 2);
  const clients = num("--clients", quick ? 100 : 1000);
  const retries = num("--retries", quick ? 2 : 3);
  const events = num("--events", quick ? 300 : 10_000);
  const rounds = num("--rounds", quick ? 1 : 2);
  const phaseS = num("--phase-s", quick ? 3 : 20);
  const all = !flag("--watchers") && !flag("--retry") && !flag("--webhooks");
  const plain = join(ROOT, "bench/data", lines === 1_000_000 ? "batch-1m.jsonl" : `batch-${lines}.jsonl`);
  // BENCH_COMMIT: when run from an exported snapshot (git archive), which commit it is.
  const inGit = Bun.spawnSync(["git", "rev-parse", "--show-toplevel"], { cwd: ROOT }).stdout.toString().trim() === ROOT;
  const rev = inGit ? Bun.spawnSync(["git", "log", "-1", "--format=%h %s"], { cwd: ROOT }).stdout.toString().trim() : (process.env.BENCH_COMMIT ?? "unknown (not a git checkout)");
  const dirty = inGit && Bun.spawnSync(["git", "status", "--porcelain", "--", "src"], { cwd: ROOT }).stdout.toString().trim() ? " (src/ has uncommitted changes)" : "";
  console.log(`follow bench ${new Date().toISOString()}, commit ${rev}${dirty}; ${machineNote()}; ulimit -n ${Bun.spawnSync(["sh", "-c", "ulimit -n"]).stdout.toString().trim()}; load ${loadAverage()}`);
  if (!existsSync(join(ROOT, "bench/data"))) mkdirSync(join(ROOT, "bench/data"), { recursive: true });
  let ok = true;
  if (all || flag("--watchers")) ok = (await watchersSection(plain, lines, runs, clients)) && ok;
  if (all || flag("--retry")) ok = (await retrySection(plain, lines, retries)) && ok;
  if (all || flag("--webhooks")) ok = (await webhooksSection(events, rounds, phaseS)) && ok;
  console.log(ok ? "\nall checks passed" : "\nSOME CHECKS FAILED");
  process.exit(ok ? 0 : 1);
}

const role = arg("--role");
if (role === "watchers") await roleWatchers(process.argv[process.argv.indexOf("--role") + 2]!, Number(process.argv[process.argv.indexOf("--role") + 3]));
else if (role === "receiver") roleReceiver(Number(process.argv[process.argv.indexOf("--role") + 2]));
else if (role === "latency") await roleLatency(process.argv[process.argv.indexOf("--role") + 2]!, Number(process.argv[process.argv.indexOf("--role") + 3]));
else if (import.meta.main) await main();

// Does the server stall while a big batch runs and ends?
//
// A 1,000,000-line chat batch on offpeak-echo (bench/gen-batch.ts, kept out
// of git under bench/data) runs on a child-process server with default
// settings (request log on, fsync on), while two clients each send one
// request every 50 ms from create to completed, finalize included:
// GET /batches/{id}, and a chat completion on offpeak-echo. Reports each
// client's latency (p50/p99/max), the server's event-loop delay (its own
// offpeak_event_loop_delay_seconds histogram, scraped at create and at
// completed), create→completed against the raw single-thread floor
// (bench/floor-echo.ts) measured in the same run, and the server's peak RSS
// (VmHWM, all threads) from start through upload, batch and download. Then
// it downloads the output and checks that every custom_id is there once.
//
// Usage: bun bench/stall.ts [--lines N] [--floor | --no-floor] [--every MS] [--log PATH] [--server-root DIR]
//   --server-root runs the server from another checkout (e.g. `git archive REV`
//   unpacked with node_modules linked) for a before/after on the same machine;
//   an older server without the event-loop metric reports NaN for it.
//   --lines 10000000 is the large mode (2.9 GB in, ≈6.4 GB out; the input is
//   generated once): the floor is skipped unless --floor (it writes the whole
//   output to /tmp again).
// Run benchmarks one at a time: flock /tmp/offpeak-bench.lock bun bench/stall.ts
import { mkdtempSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runFloor } from "./floor-echo";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { cmdlineOf, freePort, loadAverage, machineNote, peakRssMb, percentile, ROOT, rssMb, settleDisk, waitForHttp } from "./lib";

const args = process.argv.slice(2);
const opt = (name: string) => {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
};
const lines = Number(opt("--lines") ?? DEFAULT_LINES);
const everyMs = Number(opt("--every") ?? 50);
const withFloor = args.includes("--floor") || (!args.includes("--no-floor") && lines <= 2_000_000);
const input = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
const KEY = "sk-op-bench-admin-key-000000000000000000000";
const auth = { authorization: `Bearer ${KEY}` };

const freeGb = () => {
  const s = statfsSync(ROOT);
  return (s.bavail * s.bsize) / 1e9;
};
console.log(`machine : ${machineNote()}; load ${loadAverage()}; free disk ${freeGb().toFixed(1)} GB`);
const gen = await generateBatchFile(input, lines);
console.log(`input   : ${input}, ${lines} lines, ${(gen.bytes / 1e6).toFixed(1)} MB${gen.generated ? ` (generated in ${gen.seconds.toFixed(1)} s)` : ""}`);

let floorSeconds = NaN;
if (withFloor) {
  settleDisk();
  const floorOut = join(tmpdir(), "offpeak-floor-out.jsonl");
  const floor = await runFloor(input, floorOut);
  rmSync(floorOut, { force: true });
  floorSeconds = floor.seconds;
  console.log(`floor   : ${floor.lines} lines in ${floor.seconds.toFixed(2)} s (one thread: parse → echo → stringify → write)`);
}
settleDisk();

// ── the server: a child process with default settings ─────────────────────
const dataDir = mkdtempSync(join(tmpdir(), "offpeak-stall-"));
const port = freePort();
// The server's log (request lines included) goes to a file; --log PATH keeps it.
const logPath = opt("--log") ?? join(dataDir, "server.log");
const serverRoot = opt("--server-root") ?? ROOT;
const proc = Bun.spawn([process.execPath, "src/main.ts", "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir], {
  cwd: serverRoot,
  env: { ...process.env, OFFPEAK_ADMIN_KEY: KEY },
  stdin: "ignore",
  stdout: "ignore",
  stderr: Bun.file(logPath),
});
process.on("exit", () => proc.kill("SIGKILL"));
const base = `http://127.0.0.1:${port}/api/v1`;
let exitCode = 0;
try {
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, proc, 30_000);
  if (!cmdlineOf(proc.pid).includes("src/main.ts")) throw new Error("the pid is not the server");

  // Upload (streamed from disk by fetch).
  const up0 = performance.now();
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(input), "input.jsonl");
  const upRes = await fetch(`${base}/files`, { method: "POST", headers: auth, body: form });
  if (!upRes.ok) throw new Error(`upload: ${upRes.status} ${await upRes.text()}`);
  const file = (await upRes.json()) as { id: string; bytes: number };
  const upSeconds = (performance.now() - up0) / 1000;
  const rssAfterUpload = peakRssMb(proc.pid);
  console.log(`upload  : ${(file.bytes / 1e6).toFixed(1)} MB in ${upSeconds.toFixed(2)} s; server peak RSS so far ${rssAfterUpload.toFixed(0)} MB`);

  // ── create → completed, with the two clients ─────────────────────────────
  const before = await scrapeLoopDelay();
  const t0 = performance.now();
  const created = (await (
    await fetch(`${base}/batches`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    })
  ).json()) as { id: string };
  const createMs = performance.now() - t0;

  let final: Batch | null = null;
  let finalizingSeen: number | null = null;
  let stop = false;
  let rssMaxDuring = 0;
  const rssTimer = setInterval(() => (rssMaxDuring = Math.max(rssMaxDuring, rssMb(proc.pid))), 200);
  const poller = client("GET /batches/{id}", async () => {
    const res = await fetch(`${base}/batches/${created.id}`, { headers: auth });
    const b = (await res.json()) as Batch;
    if (!res.ok) throw new Error(`GET batch: ${res.status}`);
    if (b.status === "finalizing" && finalizingSeen === null) finalizingSeen = performance.now();
    if (["completed", "failed", "expired", "cancelled"].includes(b.status)) {
      final = b;
      stop = true;
    }
  });
  const chatBody = JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "Are you there while the batch runs?" }] });
  const chatter = client("POST /chat/completions", async () => {
    const res = await fetch(`${base}/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: chatBody });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`chat: ${res.status}`);
  });

  /** Sends one request every `everyMs` (a tick that passed while one was in flight is skipped and counted). */
  function client(name: string, call: () => Promise<void>) {
    const lat: number[] = [];
    let missed = 0;
    let errors = 0;
    const done = (async () => {
      const start = performance.now();
      let k = 0;
      while (!stop) {
        const s = performance.now();
        try {
          await call();
        } catch (e) {
          errors++;
          if (errors <= 3) console.error(`${name}: ${String(e)}`);
        }
        lat.push(performance.now() - s);
        const now = performance.now();
        let next = start + ++k * everyMs;
        while (next < now) {
          next += everyMs;
          k++;
          missed++;
        }
        if (!stop) await Bun.sleep(next - now);
      }
    })();
    return { name, lat, done, missed: () => missed, errors: () => errors };
  }

  await Promise.all([poller.done, chatter.done]);
  const seconds = (performance.now() - t0) / 1000;
  clearInterval(rssTimer);
  const after = await scrapeLoopDelay();
  const rssAfterBatch = peakRssMb(proc.pid);
  const batch = final! as Batch;
  const finalizeSeconds = finalizingSeen === null ? NaN : (performance.now() - finalizingSeen) / 1000;

  // ── download and check every line ─────────────────────────────────────────
  const d0 = performance.now();
  const res = await fetch(`${base}/files/${batch.output_file_id}/content`, { headers: auth });
  const contentLength = res.headers.get("content-length");
  const framing = res.headers.get("transfer-encoding") ?? "content-length";
  const seen = new Uint8Array(lines + 1);
  let outLines = 0;
  let dupes = 0;
  let unknown = 0;
  let bytes = 0;
  let rest = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body!) {
    bytes += chunk.length;
    const text = rest + dec.decode(chunk, { stream: true });
    let from = 0;
    for (let nl = text.indexOf("\n"); nl !== -1; nl = text.indexOf("\n", from)) {
      const line = text.slice(from, nl);
      from = nl + 1;
      if (!line) continue;
      outLines++;
      // {"id":"batch_req_…","custom_id":"req-N",…: the id without a full parse.
      const m = /"custom_id":"req-(\d+)"/.exec(line);
      const n = m ? Number(m[1]) : -1;
      if (n < 1 || n > lines) unknown++;
      else if (seen[n]++) dupes++;
    }
    rest = text.slice(from);
  }
  const downloadSeconds = (performance.now() - d0) / 1000;
  let missing = 0;
  for (let i = 1; i <= lines; i++) if (!seen[i]) missing++;
  const peakRss = peakRssMb(proc.pid);
  const end = await scrapeLoopDelay();

  // ── report ────────────────────────────────────────────────────────────────
  const f = (x: number) => x.toFixed(1);
  const report = (c: ReturnType<typeof client>) => {
    const s = [...c.lat].sort((a, b) => a - b);
    const p99 = percentile(s, 99);
    const max = s[s.length - 1] ?? NaN;
    const ok = p99 <= 25 && max <= 100;
    console.log(`${c.name.padEnd(24)}: n=${s.length} p50=${f(percentile(s, 50))} p99=${f(p99)} max=${f(max)} ms; ticks skipped ${c.missed()}, errors ${c.errors()}  [target p99 ≤ 25, max ≤ 100: ${ok ? "met" : "NOT met"}]`);
    return ok;
  };
  console.log(`batch   : ${batch.status}, ${batch.request_counts.completed}/${batch.request_counts.total} completed, ${batch.request_counts.failed} failed; create answered in ${f(createMs)} ms`);
  console.log(`time    : create → completed ${seconds.toFixed(2)} s (${Number.isNaN(finalizeSeconds) ? "finalizing never seen by the 50 ms poller" : `finalizing seen → completed seen ≤ ${finalizeSeconds.toFixed(2)} s`})`);
  if (withFloor) console.log(`ratio   : ${(seconds / floorSeconds).toFixed(2)}× the floor (${floorSeconds.toFixed(2)} s)  [target ≤ 1.5×: ${seconds / floorSeconds <= 1.5 ? "met" : "NOT met"}]`);
  report(poller);
  report(chatter);
  const delayMax = maxBucketBetween(before, after);
  if (Number.isNaN(after.count)) console.log("loop    : n/a (this server has no offpeak_event_loop_delay_seconds)");
  else console.log(
    `loop    : event-loop delay during the batch ≤ ${delayMax.le} s (histogram bucket; ${delayMax.over50ms} ticks over 50 ms, ${after.count - before.count} ticks); largest since start ${f(after.max * 1000)} ms  [target ≤ 50 ms: ${delayMax.over50ms === 0 ? "met" : "NOT met"}]`,
  );
  // Where the largest tick fell: by the end of the upload, of the batch, of the download.
  if (!Number.isNaN(end.count)) console.log(`          largest tick since start, at: upload end ${f(before.max * 1000)} ms, completed ${f(after.max * 1000)} ms, download end ${f(end.max * 1000)} ms`);
  console.log(`memory  : server peak RSS ${peakRss.toFixed(0)} MB (after upload ${rssAfterUpload.toFixed(0)}, largest RSS sampled during the batch ${rssMaxDuring.toFixed(0)}, peak by completed ${rssAfterBatch.toFixed(0)})  [target ≤ 256 MB: ${peakRss <= 256 ? "met" : "NOT met"}]`);
  console.log(
    `output  : ${outLines} lines, ${(bytes / 1e6).toFixed(1)} MB in ${downloadSeconds.toFixed(2)} s (${f(bytes / 1e6 / downloadSeconds)} MB/s, ${contentLength ? `Content-Length ${contentLength}` : framing}); missing ${missing}, duplicates ${dupes}, unknown ${unknown}`,
  );
  if (batch.status !== "completed" || outLines !== lines || missing || dupes || unknown) exitCode = 1;
} finally {
  proc.kill("SIGTERM");
  await proc.exited;
  rmSync(dataDir, { recursive: true, force: true });
}
process.exit(exitCode);

interface Batch {
  status: string;
  output_file_id: string | null;
  request_counts: { total: number; completed: number; failed: number };
}

interface LoopDelay {
  buckets: [number, number][];
  count: number;
  max: number;
}

async function scrapeLoopDelay(): Promise<LoopDelay> {
  const text = await (await fetch(`${base}/metrics`, { headers: auth })).text();
  const buckets: [number, number][] = [];
  for (const m of text.matchAll(/^offpeak_event_loop_delay_seconds_bucket\{le="([^"]+)"\} (\S+)$/gm)) buckets.push([m[1] === "+Inf" ? Infinity : Number(m[1]), Number(m[2])]);
  const count = Number(/^offpeak_event_loop_delay_seconds_count (\S+)$/m.exec(text)?.[1] ?? NaN);
  const max = Number(/^offpeak_event_loop_delay_max_seconds (\S+)$/m.exec(text)?.[1] ?? NaN);
  return { buckets, count, max };
}

/** The smallest bucket bound that holds every tick observed between two scrapes, and how many ticks were over 50 ms. */
function maxBucketBetween(a: LoopDelay, b: LoopDelay): { le: number; over50ms: number } {
  const total = b.count - a.count;
  let le = Infinity;
  let over50ms = 0;
  for (let i = 0; i < b.buckets.length; i++) {
    const [bound, n] = b.buckets[i]!;
    const within = n - (a.buckets[i]?.[1] ?? 0);
    if (bound === 0.05) over50ms = total - within;
    if (within === total && le === Infinity) le = bound;
  }
  return { le, over50ms };
}

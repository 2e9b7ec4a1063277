// Upload benchmark (docs/CONTRACT.md §4, BENCHMARKS.md "Upload"): a generated
// 1,000,000-line chat batch file (≈285 MB) uploaded over HTTP as multipart
// (purpose=batch, so every line is validated) to the real server, against a
// bare Bun.serve that streams the same multipart body to disk
// (bench/baseline-upload-server.ts), measured in the same run, alternating.
// A second offpeak instance takes the same file as purpose=user_data (no
// validation) to show what validation costs.
//
// Two clients, each measured against every server: Bun's fetch streaming a
// FormData from the file (what the baseline's expected 190–260 MB/s in the
// issue corresponds to on these machines) and curl (much cheaper on CPU, so
// the baseline runs 3–5× faster and the ratio measures validation against
// little more than a page-cache write).
//
// Targets: offpeak ≥ 150 MB/s, ≥ 0.6× baseline, server peak RSS ≤ 200 MB.
// Exits non-zero only if an upload fails (not on performance figures).
//
// --fsync: the cost of "durable before acknowledged" instead:
// offpeak as it runs (the upload fdatasync'ed every 16 MiB while it streams,
// then the last bytes, the rename's directory and the record's WAL commit)
// against the same server started with OFFPEAK_UNSAFE_NO_FSYNC=1 (no flush at
// all: a benchmark-only switch), alternating, for purpose=batch and (unless
// --no-user-data) purpose=user_data, whose ≈1 GB/s with curl shows the
// flushes' cost best. Target: with ≥ 0.9× without.
//
// Usage: bun bench/upload.ts [--lines N] [--file PATH] [--runs N]
//                            [--client both|curl|fetch] [--no-user-data] [--fsync]
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { MB, freePort, loadAverage, machineNote, median, peakRssMb, rssMb, settleDisk, spawnBun, waitForHttp, which, type Child } from "./lib";

const ADMIN_KEY = "sk-op-benchUploadAdminKey000000000000000000000";
const TARGET_MBPS = 150;
const TARGET_RATIO = 0.6;
const TARGET_RSS_MB = 200;

// ---- arguments ----
const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? undefined : argv[i + 1];
};
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const file = opt("file") ?? (lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`);
const runs = Number(opt("runs") ?? 3);
const withUserData = !flag("no-user-data");
const fsyncMode = flag("fsync");
const TARGET_FSYNC_RATIO = 0.9;
type Client = "curl" | "fetch";
const clientOpt = opt("client") ?? (which("curl") ? "both" : "fetch");
if (!["both", "curl", "fetch"].includes(clientOpt)) throw new Error("--client must be both, curl or fetch");
const clients: Client[] = clientOpt === "both" ? ["fetch", "curl"] : [clientOpt as Client];
if (clients.includes("curl") && !which("curl")) throw new Error("--client curl: curl is not on PATH");

// ---- the input file ----
// A --file that exists and was not made by gen-batch is uploaded as it is.
const own = opt("file") !== undefined && existsSync(file) && !existsSync(`${file}.meta.json`);
const gen = own ? { generated: false, seconds: 0 } : await generateBatchFile(file, lines);
const fileBytes = statSync(file).size;
// Read it once so every run finds it in the page cache (the first run is not penalised).
for await (const _ of Bun.file(file).stream()) {
}

// ---- one upload ----
interface Upload {
  status: number;
  seconds: number;
  body: string;
}

async function uploadCurl(url: string, purpose: string, headers: Record<string, string>): Promise<Upload> {
  const marker = "\n@@bench@@";
  const args = ["curl", "-sS", "-o", "-", "-w", `${marker}%{http_code} %{time_total}`, "-H", "Expect:"];
  for (const [k, v] of Object.entries(headers)) args.push("-H", `${k}: ${v}`);
  args.push("-F", `purpose=${purpose}`, "-F", `file=@${file};filename=${basename(file)};type=application/jsonl`, url);
  const p = Bun.spawn(args, { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  const at = out.lastIndexOf(marker);
  if (code !== 0 || at === -1) return { status: 0, seconds: NaN, body: `curl exited ${code}: ${err.trim()}` };
  const [status, seconds] = out.slice(at + marker.length).trim().split(" ");
  return { status: Number(status), seconds: Number(seconds), body: out.slice(0, at) };
}

async function uploadFetch(url: string, purpose: string, headers: Record<string, string>): Promise<Upload> {
  const form = new FormData();
  form.append("purpose", purpose);
  form.append("file", Bun.file(file), basename(file));
  const t0 = performance.now();
  try {
    const res = await fetch(url, { method: "POST", headers, body: form });
    const body = await res.text();
    return { status: res.status, seconds: (performance.now() - t0) / 1000, body };
  } catch (e) {
    return { status: 0, seconds: NaN, body: String(e) };
  }
}

const uploaders = { curl: uploadCurl, fetch: uploadFetch };

// ---- the servers ----
interface Target {
  name: string;
  child: Child;
  run(client: Client): Promise<{ ok: boolean; seconds: number; why?: string }>;
  cleanup(): void;
  /** Rates per client, MB/s. */
  mbps: Record<Client, number[]>;
  idleRssMb: number;
}

async function startOffpeak(purpose: "batch" | "user_data", opts: { noFsync?: boolean } = {}): Promise<Target> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-upload-"));
  const port = freePort();
  const env: Record<string, string> = { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn" };
  // The child inherits our environment: say explicitly which side this is.
  env.OFFPEAK_UNSAFE_NO_FSYNC = opts.noFsync ? "1" : "";
  const child = spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], { env });
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    child.assertRuns("src/main.ts");
  } catch (e) {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const base = `http://127.0.0.1:${port}/api/v1`;
  const auth = { authorization: `Bearer ${ADMIN_KEY}` };
  return {
    name: `offpeak (purpose=${purpose}${opts.noFsync ? ", no fsync" : ""})`,
    child,
    mbps: { curl: [], fetch: [] },
    idleRssMb: rssMb(child.pid),
    async run(client) {
      const r = await uploaders[client](`${base}/files`, purpose, auth);
      if (r.status !== 200) return { ok: false, seconds: r.seconds, why: `HTTP ${r.status}: ${r.body.slice(0, 300)}` };
      let rec: { id?: string; bytes?: number; status?: string; purpose?: string };
      try {
        rec = JSON.parse(r.body);
      } catch {
        return { ok: false, seconds: r.seconds, why: `not JSON: ${r.body.slice(0, 300)}` };
      }
      const ok = rec.status === "processed" && rec.bytes === fileBytes && rec.purpose === purpose;
      // Free the disk (and its dirty pages) before the next run.
      if (rec.id) await fetch(`${base}/files/${rec.id}`, { method: "DELETE", headers: auth });
      return ok ? { ok, seconds: r.seconds } : { ok, seconds: r.seconds, why: `unexpected record ${r.body.slice(0, 300)} (file is ${fileBytes} bytes)` };
    },
    cleanup() {
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function startBaseline(): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), "offpeak-bench-baseline-"));
  const port = freePort();
  const child = spawnBun(["bench/baseline-upload-server.ts", "--port", String(port), "--dir", dir]);
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    child.assertRuns("bench/baseline-upload-server.ts");
  } catch (e) {
    await child.stop();
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    name: "baseline (bare Bun.serve → disk)",
    child,
    mbps: { curl: [], fetch: [] },
    idleRssMb: rssMb(child.pid),
    async run(client) {
      const r = await uploaders[client](`http://127.0.0.1:${port}/upload`, "batch", {});
      for (const f of readdirSync(dir)) rmSync(join(dir, f), { force: true });
      if (r.status !== 200) return { ok: false, seconds: r.seconds, why: `HTTP ${r.status}: ${r.body.slice(0, 300)}` };
      const bytes = (JSON.parse(r.body) as { bytes: number }).bytes;
      return bytes >= fileBytes ? { ok: true, seconds: r.seconds } : { ok: false, seconds: r.seconds, why: `stored ${bytes} bytes < ${fileBytes}` };
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---- run ----
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");
console.log(`upload bench: ${fmt(fileBytes / MB)} MB, ${own ? "?" : lines} lines (${file}${gen.generated ? `, generated in ${fmt(gen.seconds)} s` : ""})`);
// Dirty pages left by earlier work make page-cache writes (both servers')
// slower and noisy: flush them first. Each run's upload is deleted right after.
const dirtyBefore = settleDisk();
console.log(`machine: ${machineNote()}; load avg ${fmt(loadAverage(), 2)}; flushed ${fmt(dirtyBefore, 0)} MB of dirty pages`);
console.log(`clients: ${clients.join(", ")}; ${runs} runs per server and client, alternating; figures are the median (best in brackets); MB = 10^6 bytes`);

const targets: Target[] = [];
let failures = 0;

/** One round per client: every target once, the order reversed every other round. */
async function measure(list: Target[]): Promise<void> {
  for (const client of clients) {
    console.log(`client ${client}:`);
    for (let round = 0; round < runs; round++) {
      const order = round % 2 === 0 ? list : [...list].reverse();
      for (const t of order) {
        const r = await t.run(client);
        if (!r.ok) {
          failures++;
          console.error(`  run ${round + 1} ${t.name}: FAILED — ${r.why}`);
          continue;
        }
        const mbps = fileBytes / MB / r.seconds;
        t.mbps[client].push(mbps);
        console.log(`  run ${round + 1} ${t.name.padEnd(40)} ${fmt(r.seconds, 2)} s  ${fmt(mbps).padStart(6)} MB/s`);
        await Bun.sleep(300);
      }
    }
  }
}

if (fsyncMode) {
  try {
    const pairs: [Target, Target][] = [];
    for (const purpose of withUserData ? (["batch", "user_data"] as const) : (["batch"] as const)) {
      const on = await startOffpeak(purpose);
      targets.push(on);
      const off = await startOffpeak(purpose, { noFsync: true });
      targets.push(off);
      pairs.push([on, off]);
    }
    await measure(targets);
    const rss = new Map(targets.map((t) => [t, peakRssMb(t.child.pid)]));
    const med = (t: Target, c: Client) => median(t.mbps[c]);
    const best = (t: Target, c: Client) => (t.mbps[c].length ? Math.max(...t.mbps[c]) : NaN);
    const out: Record<string, unknown> = {};
    for (const c of clients) {
      console.log(`\nclient ${c}:`);
      for (const [on, off] of pairs) {
        const ratio = med(on, c) / med(off, c);
        // Each round runs the two back to back: the median of the rounds'
        // own ratios is less moved by load that comes and goes between rounds.
        const paired = median(on.mbps[c].map((x, i) => x / off.mbps[c][i]!).filter(Number.isFinite));
        console.log(`  ${on.name.padEnd(40)} ${fmt(med(on, c)).padStart(6)} MB/s [${fmt(best(on, c))}]`);
        console.log(`  ${off.name.padEnd(40)} ${fmt(med(off, c)).padStart(6)} MB/s [${fmt(best(off, c))}]`);
        console.log(`  ratio with/without flushes: ${fmt(ratio, 2)}× of the medians, ${fmt(paired, 2)}× median of the rounds (target ≥ ${TARGET_FSYNC_RATIO}: ${ratio >= TARGET_FSYNC_RATIO ? "ok" : "BELOW TARGET"})`);
        out[`${c}_${on.name.includes("batch") ? "batch" : "user_data"}`] = { fsync_mbps: +fmt(med(on, c)), no_fsync_mbps: +fmt(med(off, c)), ratio: +fmt(ratio, 2), paired_ratio: +fmt(paired, 2) };
      }
    }
    console.log("");
    for (const t of targets) console.log(`${t.name.padEnd(40)} peak RSS ${fmt(rss.get(t)!, 0)} MB (idle ${fmt(t.idleRssMb, 0)} MB)`);
    console.log("result: " + JSON.stringify({ mode: "fsync", file_mb: +fmt(fileBytes / MB), runs, ...out, peak_rss_mb: Object.fromEntries(targets.map((t) => [t.name, +fmt(rss.get(t)!, 0)])), failures }));
  } finally {
    for (const t of targets) {
      await t.child.stop();
      t.cleanup();
    }
  }
  if (failures > 0) {
    console.error(`upload bench: ${failures} upload(s) failed`);
    process.exit(1);
  }
  process.exit(0);
}

try {
  targets.push(await startBaseline());
  targets.push(await startOffpeak("batch"));
  if (withUserData) targets.push(await startOffpeak("user_data"));
  const [baseline, offpeak, plain = null] = targets as [Target, Target, Target?];
  // Alternating rounds, so neither side always goes first.
  await measure(targets);

  const rss = new Map(targets.map((t) => [t, peakRssMb(t.child.pid)]));
  const med = (t: Target, c: Client) => median(t.mbps[c]);
  const best = (t: Target, c: Client) => (t.mbps[c].length ? Math.max(...t.mbps[c]) : NaN);
  const verdict = (ok: boolean) => (ok ? "ok" : "BELOW TARGET");
  const offRss = rss.get(offpeak)!;
  const perClient: Record<string, unknown> = {};
  for (const c of clients) {
    console.log(`\nclient ${c}:`);
    for (const t of targets) console.log(`  ${t.name.padEnd(34)} ${fmt(med(t, c)).padStart(6)} MB/s [${fmt(best(t, c))}]`);
    const ratio = med(offpeak, c) / med(baseline, c);
    console.log(`  offpeak batch upload: ${fmt(med(offpeak, c))} MB/s (target ≥ ${TARGET_MBPS}: ${verdict(med(offpeak, c) >= TARGET_MBPS)})`);
    console.log(`  ratio offpeak/baseline: ${fmt(ratio, 2)}× (target ≥ ${TARGET_RATIO}: ${verdict(ratio >= TARGET_RATIO)})`);
    if (plain) console.log(`  validation cost: batch ${fmt(med(offpeak, c))} vs user_data ${fmt(med(plain, c))} MB/s (${fmt(med(offpeak, c) / med(plain, c), 2)}×)`);
    perClient[c] = {
      offpeak_mbps: +fmt(med(offpeak, c)),
      baseline_mbps: +fmt(med(baseline, c)),
      ratio: +fmt(ratio, 2),
      ...(plain ? { user_data_mbps: +fmt(med(plain, c)) } : {}),
    };
  }
  console.log("");
  for (const t of targets) console.log(`${t.name.padEnd(34)} peak RSS ${fmt(rss.get(t)!, 0)} MB (idle ${fmt(t.idleRssMb, 0)} MB)`);
  console.log(`offpeak peak RSS: ${fmt(offRss, 0)} MB (target ≤ ${TARGET_RSS_MB}: ${verdict(offRss <= TARGET_RSS_MB)})`);
  console.log(
    "result: " +
      JSON.stringify({
        file_mb: +fmt(fileBytes / MB),
        lines: own ? null : lines,
        runs,
        ...perClient,
        offpeak_peak_rss_mb: +fmt(offRss, 0),
        baseline_peak_rss_mb: +fmt(rss.get(baseline)!, 0),
        ...(plain ? { user_data_peak_rss_mb: +fmt(rss.get(plain)!, 0) } : {}),
        failures,
      }),
  );
} finally {
  for (const t of targets) {
    await t.child.stop();
    t.cleanup();
  }
}
if (failures > 0) {
  console.error(`upload bench: ${failures} upload(s) failed`);
  process.exit(1);
}

// Uploads benchmark (docs/CONTRACT.md §22 "OpenAI Uploads"): a batch file of N GB
// sent through the Uploads API in 64 MiB parts (create, the parts one after
// another as the Python SDK's upload_file_chunked sends them, complete —
// which checks every line, reading the parts as one stream) against the
// same file sent whole by a direct POST /files (checked while it streams),
// in the same run, alternating; medians. Each way has a server of its own,
// so each peak RSS is that way's alone.
//
// Target (docs/CONTRACT.md §22): memory stays flat whatever the upload's size.
// Exits non-zero only if an upload fails.
//
// Usage: bun bench/uploads.ts [--gb N (default 8)] [--runs N (default 3)] [--file PATH]
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { generateBatchFile } from "./gen-batch";
import { MB, benchArgs, freePort, loadAverage, machineNote, median, rssMb, settleDisk, spawnBun, waitForHttp, type Child } from "./lib";

const ADMIN_KEY = "sk-op-benchUploadsAdminKey00000000000000000000";
const PART_BYTES = 64 * 1024 * 1024;
/** gen-batch's lines are ≈280 bytes. */
const BYTES_PER_LINE = 280;

const { opt } = benchArgs();
const gb = Number(opt("gb") ?? 8);
const runs = Number(opt("runs") ?? 3);
const lines = Math.ceil((gb * 1e9) / BYTES_PER_LINE);
const file = opt("file") ?? `bench/data/batch-${gb}gb.jsonl`;
const gen = await generateBatchFile(file, lines);
const fileBytes = statSync(file).size;

interface Server {
  name: string;
  child: Child;
  base: string;
  dataDir: string;
  idleRssMb: number;
  mbps: number[];
}

const auth = { authorization: `Bearer ${ADMIN_KEY}` };

async function startServer(name: string): Promise<Server> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-uploads-"));
  const port = freePort();
  const child = spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], {
    // An 8 GB file of gen-batch's short lines has ≈29M lines: past the default 10M a batch file may hold.
    env: { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn", OFFPEAK_UNSAFE_NO_FSYNC: "", OFFPEAK_MAX_BATCH_LINES: String(Math.max(10_000_000, 2 * lines)) },
  });
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
  child.assertRuns("src/main.ts");
  return { name, child, base: `http://127.0.0.1:${port}/api/v1`, dataDir, idleRssMb: rssMb(child.pid), mbps: [] };
}

async function call(url: string, init: RequestInit): Promise<any> {
  const res = await fetch(url, { ...init, headers: { ...auth, ...(init.headers as Record<string, string>) } });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${init.method ?? "GET"} ${url}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/** The file through the Uploads API; the File's id. */
async function viaUploads(s: Server): Promise<string> {
  const json = { "content-type": "application/json" };
  const up = await call(`${s.base}/uploads`, {
    method: "POST",
    headers: json,
    body: JSON.stringify({ bytes: fileBytes, filename: basename(file), mime_type: "application/jsonl", purpose: "batch" }),
  });
  const ids: string[] = [];
  for (let at = 0; at < fileBytes; at += PART_BYTES) {
    const form = new FormData();
    form.append("data", Bun.file(file).slice(at, Math.min(fileBytes, at + PART_BYTES)), "part");
    ids.push((await call(`${s.base}/uploads/${up.id}/parts`, { method: "POST", body: form })).id);
  }
  const done = await call(`${s.base}/uploads/${up.id}/complete`, { method: "POST", headers: json, body: JSON.stringify({ part_ids: ids }) });
  if (done.status !== "completed" || done.file?.bytes !== fileBytes) throw new Error(`unexpected completion: ${JSON.stringify(done).slice(0, 300)}`);
  return done.file.id;
}

/** The same file by one POST /files. */
async function direct(s: Server): Promise<string> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(file), basename(file));
  const rec = await call(`${s.base}/files`, { method: "POST", body: form });
  if (rec.bytes !== fileBytes) throw new Error(`unexpected record: ${JSON.stringify(rec).slice(0, 300)}`);
  return rec.id;
}

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");
console.log(`uploads bench: ${fmt(fileBytes / MB)} MB, ${lines} lines (${file}${gen.generated ? `, generated in ${fmt(gen.seconds)} s` : ""}); parts of ${PART_BYTES / 2 ** 20} MiB`);
// Read once so every run finds it in the page cache.
for await (const _ of Bun.file(file).stream()) {
}
console.log(`machine: ${machineNote()}; load avg ${fmt(loadAverage(), 2)}; flushed ${fmt(settleDisk(), 0)} MB of dirty pages`);
console.log(`${runs} runs each, alternating; medians (best in brackets); MB = 10^6 bytes`);

const uploads = await startServer("Uploads API (64 MiB parts)");
const whole = await startServer("direct POST /files");
const ways: [Server, (s: Server) => Promise<string>][] = [
  [uploads, viaUploads],
  [whole, direct],
];
let failures = 0;
try {
  for (let r = 0; r < runs; r++) {
    for (const [s, send] of r % 2 === 0 ? ways : [...ways].reverse()) {
      const t0 = performance.now();
      try {
        const id = await send(s);
        const seconds = (performance.now() - t0) / 1000;
        s.mbps.push(fileBytes / MB / seconds);
        console.log(`  run ${r + 1}: ${s.name}: ${fmt(seconds, 2)} s, ${fmt(fileBytes / MB / seconds)} MB/s`);
        // Free the disk before the next run.
        await call(`${s.base}/files/${id}`, { method: "DELETE" });
      } catch (e) {
        failures++;
        console.log(`  run ${r + 1}: ${s.name}: FAILED ${String(e).slice(0, 400)}`);
      }
      settleDisk();
    }
  }
} finally {
  for (const [s] of ways) {
    const peak = s.child.peakRssMb();
    console.log(`${s.name}: ${fmt(median(s.mbps))} MB/s [${fmt(Math.max(...s.mbps))}]; server peak RSS ${fmt(peak, 0)} MB (idle ${fmt(s.idleRssMb, 0)} MB)`);
    await s.child.stop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}
const ratio = median(uploads.mbps) / median(whole.mbps);
console.log(`ratio (Uploads / direct): ${fmt(ratio, 2)}×`);
if (failures > 0) process.exit(1);

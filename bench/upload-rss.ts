// Where an upload's memory goes: the server's RSS sampled every 20 ms
// (VmRSS, all threads) while curl uploads a generated batch file and then
// downloads it again, beside its idle RSS and its RSS once the two
// validation Workers exist (after a small upload). Each variant is a fresh
// server: the default, a duplicate check held to its smallest bound
// (OFFPEAK_DUPLICATE_CHECK_BYTES=8192: what is not the fingerprint table),
// and purpose=user_data (no validation at all).
//
// Usage: bun bench/upload-rss.ts [--lines N] [--only default|small|user_data]
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { MB, freePort, machineNote, peakRssMb, rssMb, settleDisk, spawnBun, waitForHttp, which } from "./lib";

const ADMIN_KEY = "sk-op-benchUploadRssAdminKey00000000000000000";
const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? undefined : argv[i + 1];
};
const lines = Number(opt("lines") ?? DEFAULT_LINES);
const file = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
if (!which("curl")) throw new Error("needs curl");
await generateBatchFile(file, lines);
const bytes = Bun.file(file).size;

interface Variant {
  name: string;
  env: Record<string, string>;
  purpose: "batch" | "user_data";
}
const variants: Variant[] = [
  { name: "default", env: {}, purpose: "batch" },
  { name: "small", env: { OFFPEAK_DUPLICATE_CHECK_BYTES: "8192" }, purpose: "batch" },
  { name: "user_data", env: {}, purpose: "user_data" },
].filter((v) => !opt("only") || v.name === opt("only")) as Variant[];

/** Samples a pid's VmRSS every 20 ms while `work` runs; returns the largest sample. */
async function sampled<T>(pid: number, work: () => Promise<T>): Promise<{ value: T; maxRss: number; seconds: number }> {
  let maxRss = 0;
  let running = true;
  const sampler = (async () => {
    while (running) {
      maxRss = Math.max(maxRss, rssMb(pid));
      await Bun.sleep(20);
    }
  })();
  const t0 = performance.now();
  const value = await work();
  const seconds = (performance.now() - t0) / 1000;
  running = false;
  await sampler;
  return { value, maxRss: Math.max(maxRss, rssMb(pid)), seconds };
}

async function curl(args: string[]): Promise<string> {
  const p = Bun.spawn(["curl", "-sS", "-H", `authorization: Bearer ${ADMIN_KEY}`, ...args], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`curl ${code}: ${err}`);
  return out;
}

const fmt = (x: number) => x.toFixed(0);
console.log(`upload-rss: ${lines} lines, ${(bytes / MB).toFixed(1)} MB (${file}); ${machineNote()}`);
for (const v of variants) {
  settleDisk();
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-rss-"));
  const port = freePort();
  const child = spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], {
    env: { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn", ...v.env },
  });
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    child.assertRuns("src/main.ts");
    const base = `http://127.0.0.1:${port}/api/v1`;
    const idle = rssMb(child.pid);
    // A small upload first: the two validation Workers exist (and are kept) from here on.
    const small = join(dataDir, "small.jsonl");
    writeFileSync(small, Array.from({ length: 100 }, (_, i) => JSON.stringify({ custom_id: `w${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "m" } })).join("\n") + "\n");
    await curl(["-F", `purpose=${v.purpose}`, "-F", `file=@${small}`, `${base}/files`]);
    await Bun.sleep(500);
    const warm = rssMb(child.pid);
    const up = await sampled(child.pid, () => curl(["-H", "Expect:", "-F", `purpose=${v.purpose}`, "-F", `file=@${file};type=application/jsonl`, `${base}/files`]));
    const rec = JSON.parse(up.value) as { id?: string; status?: string; bytes?: number; error?: unknown };
    if (rec.status !== "processed" || rec.bytes !== bytes) throw new Error(`upload failed: ${up.value.slice(0, 300)}`);
    const afterUpload = rssMb(child.pid);
    const down = await sampled(child.pid, () => curl(["-o", "/dev/null", "-w", "%{size_download}", `${base}/files/${rec.id}/content`]));
    if (Number(down.value) !== bytes) throw new Error(`download: ${down.value} bytes, want ${bytes}`);
    console.log(
      `${v.name.padEnd(9)}: idle ${fmt(idle)} MB, with Workers ${fmt(warm)} MB; upload ${(bytes / MB / up.seconds).toFixed(1)} MB/s, max RSS ${fmt(up.maxRss)} MB, after ${fmt(afterUpload)} MB; download max RSS ${fmt(down.maxRss)} MB; peak (VmHWM) ${fmt(peakRssMb(child.pid))} MB`,
    );
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// Starts offpeak as a child process for benchmarks (so its peak RSS can be
// read from /proc), on a free port with a fresh data dir.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const BENCH_KEY = "sk-op-bench-admin-key-000000000000000000000";

export interface BenchServer {
  pid: number;
  /** The server's stderr, when started with `{ stderr: "pipe" }`. */
  stderr: ReadableStream<Uint8Array> | null;
  base: string;
  dataDir: string;
  peakRssMb(): number;
  stop(): Promise<void>;
}

// Peak RSS in MB (10^6 bytes) and free ports: the one bench helper library (./lib.ts).
// (Until 2026-11-29 this file's peakRssMb returned MiB: BENCHMARKS.md labels those figures MiB.)
import { freePort, peakRssMb, percentile, waitForHttp } from "./lib";
export { freePort, peakRssMb, percentile };

export async function startBenchServer(env: Record<string, string> = {}, config?: unknown, opts: { stderr?: "inherit" | "pipe" } = {}): Promise<BenchServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-"));
  const port = await freePort();
  const args = [process.execPath, "src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir];
  if (config) {
    writeFileSync(join(dataDir, "config.json"), JSON.stringify(config));
    args.push("--config", join(dataDir, "config.json"));
  }
  const proc = Bun.spawn(args, {
    cwd: join(import.meta.dir, ".."),
    env: { ...process.env, OFFPEAK_ADMIN_KEY: BENCH_KEY, OFFPEAK_LOG_LEVEL: "warn", ...env },
    stdout: "ignore",
    stderr: opts.stderr ?? "inherit",
  });
  const base = `http://127.0.0.1:${port}/api/v1`;
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, proc, 10_000);
  return {
    pid: proc.pid,
    stderr: opts.stderr === "pipe" ? (proc.stderr as ReadableStream<Uint8Array>) : null,
    base,
    dataDir,
    peakRssMb: () => peakRssMb(proc.pid),
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export const auth = { authorization: `Bearer ${BENCH_KEY}` };

export async function uploadBatchFile(base: string, path: string): Promise<{ id: string; bytes: number }> {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", Bun.file(path), "input.jsonl");
  const res = await fetch(`${base}/files`, { method: "POST", headers: auth, body: form });
  if (!res.ok) throw new Error(`upload failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as { id: string; bytes: number };
}


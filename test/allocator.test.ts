// `offpeak serve` re-executes itself with MIMALLOC_PURGE_DELAY=20 and
// BUN_CONFIG_MAX_HTTP_REQUESTS=65535 (src/allocator.ts):
// the same process (id, pipes) with the variable set, unless the environment
// already sets it or opts out.
import { describe, expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { freshDataDir, SERVE_READY } from "./helpers/server";
import { pollUntil } from "./helpers/batches";
import { cleanEnv, freePort } from "./helpers/env";

/** Without the allocator settings that serve sets for itself, so a test sees what it sets. */
const allocEnv = (extra: Record<string, string>) => cleanEnv(extra, (k) => k === "MIMALLOC_PURGE_DELAY" || k === "BUN_CONFIG_MAX_HTTP_REQUESTS");

const ROOT = join(import.meta.dir, "..");

/** Starts `serve` with `env`, waits for its answer, returns the process's environment as it runs and what it printed. */
async function serveWith(env: Record<string, string>) {
  const dataDir = freshDataDir();
  const p = freePort();
  const proc = Bun.spawn([process.execPath, join(ROOT, "src/main.ts"), "serve", "--port", String(p), "--host", "127.0.0.1", "--data-dir", dataDir], {
    cwd: ROOT,
    env: allocEnv(env),
    stdout: "pipe",
    stderr: "ignore",
  });
  try {
    await pollUntil(() => fetch(`http://127.0.0.1:${p}/healthz`).then((r) => r.status, () => 0), (s) => s === 200, 20_000, 50, "server up");
    const environ = readFileSync(`/proc/${proc.pid}/environ`, "utf8").split("\0");
    const value = (name: string) => environ.find((e) => e.startsWith(name + "="))?.slice(name.length + 1) ?? null;
    return { purgeDelay: value("MIMALLOC_PURGE_DELAY"), maxHttpRequests: value("BUN_CONFIG_MAX_HTTP_REQUESTS"), alive: proc.exitCode === null };
  } finally {
    proc.kill("SIGTERM");
    const code = await proc.exited;
    expect(code).toBe(0); // the process we started is the server: SIGTERM reached it and it shut down cleanly
    const out = await new Response(proc.stdout).text();
    expect(out).toMatch(SERVE_READY); // its stdout is the pipe we gave it: the banner is there
    rmSync(dataDir, { recursive: true, force: true });
  }
}

describe.skipIf(process.platform !== "linux")("serve returns freed memory at once", () => {
  test("the same process runs on with MIMALLOC_PURGE_DELAY=20 and BUN_CONFIG_MAX_HTTP_REQUESTS=65535", async () => {
    expect(await serveWith({})).toEqual({ purgeDelay: "20", maxHttpRequests: "65535", alive: true });
  });
  test("a value set by the operator wins (the other is still set); OFFPEAK_NO_REEXEC=1 leaves the environment alone", async () => {
    expect(await serveWith({ MIMALLOC_PURGE_DELAY: "250" })).toEqual({ purgeDelay: "250", maxHttpRequests: "65535", alive: true });
    expect(await serveWith({ BUN_CONFIG_MAX_HTTP_REQUESTS: "512" })).toEqual({ purgeDelay: "20", maxHttpRequests: "512", alive: true });
    expect(await serveWith({ OFFPEAK_NO_REEXEC: "1" })).toEqual({ purgeDelay: null, maxHttpRequests: null, alive: true });
  });
});

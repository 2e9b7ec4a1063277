// Imported first by main.ts: before anything else loads, `offpeak serve`
// re-executes itself with MIMALLOC_PURGE_DELAY=20 (PURGE_DELAY_MS), and
// with BUN_CONFIG_MAX_HTTP_REQUESTS raised (MAX_HTTP_REQUESTS, below).
//
// Why: Bun allocates native memory with mimalloc, which keeps freed pages
// for a while before giving them back to the OS. A batch churns through
// such memory on two Worker threads at once, and the kept pages take the
// server's peak RSS past its 256 MB bound (bench/stall.ts with
// OFFPEAK_NO_REEXEC=1: 253–257 MB at 1M lines, 264–270 MB at 10M).
//
// How long: the shorter the delay, the lower the peak and the more page
// faults (a purged page that is used again is faulted back in). On the
// first machine 0 cost the 1M batch ≈25% (6.9–7.2 s against 5.5–5.7 s); on
// the AMD EPYC VM of 2026-11-26 it cost 2×: 12.8–13.8 s against 6.1 s, where
// page faults are dearer. bench/stall.ts there, 1M lines / 10M lines:
//   delay 0 or 2 ms   12.8–13.8 s, 204–211 MB   /  (2 ms) 137 s, 222 MB
//   delay 20 ms       8.5 s, 216 MB             /  94.5 s, 239 MB
//   delay 50 ms       6.6–7.3 s, 236–241 MB     /  71.3 s, 252 MB
//   delay 250 ms      5.4 s, 263 MB
//   mimalloc default  6.1 s, 255 MB
// 20 ms keeps both sizes well under the bound. Its cost in speed comes
// mostly from churn of native buffers, which is why the batch part writers
// encode into pooled buffers (batches/worker/runShard.ts) rather than a new
// string and a new encoded buffer per MB of results: at 20 ms, 1M lines in
// 7.5–7.9 s with them against 11.1–11.8 s without, 10M in 82.8 s at 231 MB
// (BENCHMARKS.md "Stall"). The
// chat pass-through barely moves with it (bench/ab/proxy-ab.ts, 12 rounds:
// 0.881× naive at 0 ms, 0.883× at 2 ms). An operator who prefers speed sets
// MIMALLOC_PURGE_DELAY (in ms) higher. The option is read once, when the
// process starts, hence the re-exec: execve keeps the process id, its
// descriptors and its exact command line, so supervisors, signals and
// pipes see one process.
//
// Not for client commands (short-lived), nor when the environment already
// sets both (any value: an operator's choice wins), nor with
// OFFPEAK_NO_REEXEC=1 (settingsToAdd).

import { readFileSync } from "node:fs";
import { processEnv, type Env } from "./config";

/** mimalloc's purge delay for `serve` (see above). */
export const PURGE_DELAY_MS = 20;

/**
 * How many requests Bun's fetch runs at once in the whole process
 * (BUN_CONFIG_MAX_HTTP_REQUESTS, also read only when the process starts;
 * Bun's default 256 queues the rest). With front threads every request they
 * relay is a fetch, an SSE stream one for as long as it is open: 256
 * clients following batch events would hold every later relayed request
 * (measured: the 257th of 300 open streams waits). 65,535 is Bun's most.
 */
export const MAX_HTTP_REQUESTS = 65_535;

/** What `serve` adds to its environment when it re-executes itself: each setting the operator did not set (their value wins). Empty: no re-exec, as with OFFPEAK_NO_REEXEC=1. */
export function settingsToAdd(env: Env): Record<string, string> {
  if (env.OFFPEAK_NO_REEXEC === "1") return {};
  const add: Record<string, string> = {};
  if (env.MIMALLOC_PURGE_DELAY === undefined) add.MIMALLOC_PURGE_DELAY = String(PURGE_DELAY_MS);
  if (env.BUN_CONFIG_MAX_HTTP_REQUESTS === undefined) add.BUN_CONFIG_MAX_HTTP_REQUESTS = String(MAX_HTTP_REQUESTS);
  return add;
}

/** Words that make the command something other than `serve` (see main.ts). */
const NOT_SERVE = new Set(["keys", "files", "batches", "batch", "healthcheck", "webhooks", "help", "--help", "-h"]);

/** The arguments this process was started with, exactly (so `ps` and anything matching the command line see the same after the re-exec). */
function selfArgs(): string[] {
  // Synchronous on purpose: this runs once, at start, before the server or anything else is loaded.
  try {
    const args = readFileSync("/proc/self/cmdline", "utf8").split("\0");
    args.pop(); // after the last NUL
    if (args.length > 0) return args;
  } catch {
    // not Linux: rebuilt from what Bun says
  }
  // A compiled executable sees its embedded entry as argv[1] (/$bunfs/…); Bun adds it again on start.
  const compiled = Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
  return compiled ? [process.execPath, ...process.argv.slice(2)] : [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
}

export function returnFreedMemoryAtOnce(env: Env = processEnv(), args: string[] = process.argv.slice(2)): void {
  const add = settingsToAdd(env);
  if (Object.keys(add).length === 0) return;
  if (args.some((a) => NOT_SERVE.has(a))) return;
  if (typeof process.execve !== "function") return;
  try {
    process.execve(process.execPath, selfArgs(), { ...env, ...add });
  } catch {
    // execve failed (the process goes on as it was): only these settings are lost.
  }
}

returnFreedMemoryAtOnce();

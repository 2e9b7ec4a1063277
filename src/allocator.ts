// Imported first by main.ts: before anything else loads, `offpeak serve`
// re-executes itself with MIMALLOC_PURGE_DELAY=0.
//
// Why: Bun allocates native memory with mimalloc, which keeps freed pages
// for a while before giving them back to the OS. A batch churns through
// such memory on two Worker threads at once, and the kept pages were what
// took the server's peak RSS past its 256 MB bound. bench/stall.ts,
// alternating with OFFPEAK_NO_REEXEC=1: a 1M-line batch peaked at 206–210
// MB instead of 253–257, a 10M-line one at 236 MB instead of 264–270. The
// price is batch speed: 6.9–7.2 s instead of 5.5–5.7 s for the 1M batch
// (1.18–1.25× the single-thread floor instead of 0.90–0.94×); the chat
// pass-through measured the same (bench/proxy-ab.ts, 8 rounds: 1.02×).
// An operator who prefers speed sets MIMALLOC_PURGE_DELAY (in ms) to
// mimalloc's own default or more. The option is read once, when the process
// starts, hence the re-exec: execve keeps the process id, its descriptors
// and its exact command line, so supervisors, signals and pipes see one
// process.
//
// Not for client commands (short-lived), nor when the environment already
// sets MIMALLOC_PURGE_DELAY (any value: an operator's choice wins), nor with
// OFFPEAK_NO_REEXEC=1.

import { readFileSync } from "node:fs";

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

export function returnFreedMemoryAtOnce(env: NodeJS.ProcessEnv = process.env, args: string[] = process.argv.slice(2)): void {
  if (env.MIMALLOC_PURGE_DELAY !== undefined || env.OFFPEAK_NO_REEXEC === "1") return;
  if (args.some((a) => NOT_SERVE.has(a))) return;
  if (typeof process.execve !== "function") return;
  try {
    process.execve(process.execPath, selfArgs(), { ...env, MIMALLOC_PURGE_DELAY: "0" });
  } catch {
    // execve failed (the process goes on as it was): only the memory tuning is lost.
  }
}

returnFreedMemoryAtOnce();

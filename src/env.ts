// The one place offpeak reads process.env. config.ts turns the environment
// into the server's Config (and the client commands' defaults) and
// re-exports what is here; this module holds the few settings that must be
// known where no Config reaches:
//
// - before anything else loads: allocator.ts decides from them whether
//   `serve` re-executes itself (main.ts imports it first);
// - in every thread for itself: batch Workers get no Config object and each
//   has its own copy of the environment, so the durability switch and the
//   test hooks below are resolved once per thread, when this module loads.
//
// It imports nothing: it loads in every batch Worker (SPEC §20: each module
// a Worker loads costs it memory).

export type Env = Record<string, string | undefined>;

/** This process's environment (in a Worker, that thread's copy). */
export const processEnv = (): Env => process.env;

/**
 * allocator.ts re-executes `serve` with a mimalloc purge delay unless the
 * operator set MIMALLOC_PURGE_DELAY (any value: their choice wins) or
 * OFFPEAK_NO_REEXEC=1.
 */
export const reexecAllowed = (env: Env): boolean => env.MIMALLOC_PURGE_DELAY === undefined && env.OFFPEAK_NO_REEXEC !== "1";

/** Settings each thread reads for itself, once (see the top of this file). */
export interface ThreadSettings {
  /**
   * false with OFFPEAK_UNSAFE_NO_FSYNC=1: offpeak makes no flush of its own
   * (src/fsync.ts). For benchmarks only: an OS crash or power loss can then
   * lose acknowledged files and records.
   */
  fsync: boolean;
  /** OFFPEAK_TEST_FSYNC_LOG=PATH (tests only): where src/fsync.ts logs each completed flush. */
  testFsyncLog: string | null;
  /**
   * Wait before each flush (tests only): OFFPEAK_TEST_FSYNC_DELAY_MS on the
   * main thread, OFFPEAK_TEST_FSYNC_WORKER_DELAY_MS in Workers.
   */
  testFsyncDelayMs: number;
  /** OFFPEAK_TEST_FINALIZE_PAUSE_MS (tests only): finalize logs each step and waits this long after it (src/batches/finalize.ts). */
  testFinalizePauseMs: number;
}

export function threadSettingsOf(env: Env, mainThread: boolean): ThreadSettings {
  return {
    fsync: env.OFFPEAK_UNSAFE_NO_FSYNC !== "1",
    testFsyncLog: env.OFFPEAK_TEST_FSYNC_LOG || null,
    testFsyncDelayMs: Number(mainThread ? env.OFFPEAK_TEST_FSYNC_DELAY_MS : env.OFFPEAK_TEST_FSYNC_WORKER_DELAY_MS) || 0,
    testFinalizePauseMs: Number(env.OFFPEAK_TEST_FINALIZE_PAUSE_MS) || 0,
  };
}

/** This thread's settings, read when this module loads. */
export const threadSettings: ThreadSettings = threadSettingsOf(process.env, Bun.isMainThread);

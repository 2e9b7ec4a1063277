// The settings each thread holds for itself, where no Config object
// reaches: the durability switch and the test hooks of src/fsync.ts and
// src/batches/finalize.ts. They come from the environment, which only
// config.ts reads: it sets the main thread's when it loads, and hands the
// batch Workers theirs in their init message (batches/pool.ts), since a
// Worker does not load config.ts (docs/CONTRACT.md §20: each module a Worker loads
// costs it memory). Until set, a thread has the defaults (flushes on).
//
// It imports nothing: it loads in every batch Worker.

/** Settings each thread holds for itself (see the top of this file). */
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
  /** OFFPEAK_TEST_FRONT_CRASH_PATH (tests only): a front thread that gets a request for this path fails with an uncaught error (src/http/front). */
  testFrontCrashPath: string | null;
}

export function threadSettingsOf(env: Record<string, string | undefined>, mainThread: boolean): ThreadSettings {
  return {
    fsync: env.OFFPEAK_UNSAFE_NO_FSYNC !== "1",
    testFsyncLog: env.OFFPEAK_TEST_FSYNC_LOG || null,
    testFsyncDelayMs: Number(mainThread ? env.OFFPEAK_TEST_FSYNC_DELAY_MS : env.OFFPEAK_TEST_FSYNC_WORKER_DELAY_MS) || 0,
    testFinalizePauseMs: Number(env.OFFPEAK_TEST_FINALIZE_PAUSE_MS) || 0,
    testFrontCrashPath: env.OFFPEAK_TEST_FRONT_CRASH_PATH || null,
  };
}

/** Until set: the settings of an environment that sets none of them (flushes on, no test hooks). */
let current: ThreadSettings = threadSettingsOf({}, true);

/** This thread's settings now (read at each use: they are set after this module loads). */
export function threadSettings(): ThreadSettings {
  return current;
}

/** Set once per thread: by config.ts on the main thread, from the init message in a batch Worker. */
export function setThreadSettings(s: ThreadSettings): void {
  current = s;
}

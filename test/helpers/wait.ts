// Waiting in tests: for a condition, never for the clock.
//
// A test on a slow or busy machine must wait longer, and a test on a broken
// build must still fail with a clear message. So a wait has no fixed
// deadline: it gives up when nothing has moved for `stallMs` (the value that
// `progress` reads did not change), however long the whole wait took. A
// batch that completes one line every second on a starved machine is
// waited for; a batch that stopped moving fails within `stallMs` of
// stopping, naming what it waited for and the last value seen. Without a
// `progress`, the condition's own value is the progress (any change counts).
//
// The per-test timeouts (SCENARIO_MS) are then only a guard against a hang
// that a wait does not see, set far above what any machine needs.

/** The outer bound of a scenario test (restarts, outages, faults): a guard against hangs, not a speed requirement. */
export const SCENARIO_MS = 300_000;

/**
 * The stall limits scale with this (OFFPEAK_TEST_PATIENCE, default 1): on a
 * machine known to be slow, raise it rather than any single test's numbers.
 */
export const PATIENCE = Math.max(1, Number(process.env.OFFPEAK_TEST_PATIENCE) || 1);

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface WaitOptions<T> {
  /** Fail when the progress has not changed for this long (ms; times PATIENCE). Default 20 s. */
  stallMs?: number;
  /** How often to look (ms). Default 50. */
  everyMs?: number;
  /** What changes while things move (a count, a status). Default: the whole value, as JSON. */
  progress?: (v: T) => unknown;
  /** Named in the error. */
  what?: string;
}

/** Calls `get` until `done(value)` holds; fails after `stallMs` without progress (see above). */
export async function pollUntil<T>(get: () => Promise<T> | T, done: (v: T) => boolean, opts: WaitOptions<T> = {}): Promise<T> {
  const stallMs = (opts.stallMs ?? 20_000) * PATIENCE;
  const every = opts.everyMs ?? 50;
  const progressOf = opts.progress ?? ((v: T) => v);
  const started = Date.now();
  let lastMove = started;
  let lastProgress: string | undefined;
  for (;;) {
    const value = await get();
    if (done(value)) return value;
    const p = JSON.stringify(progressOf(value)) ?? "undefined";
    const now = Date.now();
    if (p !== lastProgress) {
      lastProgress = p;
      lastMove = now;
    } else if (now - lastMove > stallMs)
      throw new Error(
        `no progress for ${stallMs} ms (after ${now - started} ms in all) waiting for ${opts.what ?? "a condition"}; ` +
          `last value: ${(JSON.stringify(value) ?? String(value)).slice(0, 2000)}`,
      );
    await sleep(every);
  }
}

/** Waits until `cond()` is true; fails after `stallMs` (default 20 s, times PATIENCE): a yes/no condition has no progress to measure. */
export function waitFor(cond: () => boolean | Promise<boolean>, what: string, stallMs = 20_000): Promise<boolean> {
  return pollUntil(cond, (v) => v, { what, stallMs, progress: () => 0 });
}

/**
 * A value that an earlier test of the same file makes: `needs(done, "the
 * restart test")` returns it, or fails this test saying which test it
 * depends on (instead of a cascade of unrelated-looking failures).
 */
export function needs<T>(value: T | undefined | null, fromTest: string): T {
  if (value === undefined || value === null) throw new Error(`depends on "${fromTest}" earlier in this file, which did not get that far (see its failure above)`);
  return value;
}

/**
 * Rate-limit windows on Postgres (a cluster) are whole wall-clock minutes:
 * a test that spends a key's budget and then expects a refusal must not
 * straddle a minute's end, or the second half meets a fresh window. Waits
 * for the next minute when less than `marginMs` of this one is left. Only
 * in the Postgres mode: elsewhere a key's window starts at its first request.
 */
export async function clearOfMinuteEnd(marginMs = 15_000): Promise<void> {
  if (process.env.OFFPEAK_TEST_DATABASE === "postgres") await awayFromMinuteEnd(marginMs);
}

/** Waits for the next wall-clock minute when less than `marginMs` of this one is left (a cluster's rate-limit window). */
export async function awayFromMinuteEnd(marginMs: number): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < marginMs) await sleep(left + 50);
}


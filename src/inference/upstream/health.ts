// Whether each upstream is reachable, and how fast batch lines may go to it.
// This module is the one owner of that state (docs/CONTRACT.md §11). It lives in memory
// shared by the main thread (interactive calls, probes, /status, /metrics)
// and the batch Workers (batch lines), so that every request reads it with an
// atomic load and reports its outcome with an atomic add: no message per
// request. Only two transitions need more than that, and each has one owner:
//
//  - up → suspect: whoever sees the FAIL_THRESHOLD-th failure in a row (a
//    Worker or the main thread) flips the state with a compare-and-swap; a
//    Worker then tells the main thread (a message), which probes at once.
//    While suspect, no batch request starts.
//  - suspect → down (the probe failed too: the upstream fails as a whole)
//    or → up (it answered: the failures were about those requests, e.g. a
//    500-on-every-try poison line or random 503s, and they count as attempts):
//    only the main thread. Going down bumps the epoch: attempts made before
//    it that failed as a whole are forgiven (docs/CONTRACT.md §11).
//  - down → up: only the main thread, when a probe (`GET {base_url}/models`)
//    or a discovery succeeds.
//
// Batch dispatch is also slowed here when an upstream answers 429: a window of
// batch requests in flight per upstream (additive increase, multiplicative
// decrease, never below 1), and a pause of the whole upstream's batch
// dispatch until its `retry-after` has passed. Interactive requests do not
// take from the window: they keep their priority and their scheduler slots.

import type { Fate } from "./fate";

/** Int32 cells per upstream. */
export const HEALTH_CELLS = 8;
const STATE = 0; // UP, DOWN or SUSPECT
const EPOCH = 1; // +1 each time the upstream goes down
const FAILS = 2; // failures as a whole in a row (no success between)
const WINDOW = 3; // batch requests allowed in flight at once (AIMD)
const WINDOW_IN_FLIGHT = 4; // batch requests in flight under the window
const GROWTH = 5; // successes counted toward the next +1 of the window
/** Float64 cells per upstream (ms since epoch; plain reads and writes: a torn or stale value only shifts a wait). */
export const TIME_CELLS = 2;
const PAUSE_UNTIL = 0; // no batch request starts before this (retry-after)
const LAST_DECREASE = 1;

/** Failures as a whole in a row (connection refused/reset, timeouts, 502/503/504) that turn an upstream down. */
export const FAIL_THRESHOLD = 3;
/** The window when nothing has limited it: larger than any real concurrency. */
const OPEN_WINDOW = 1 << 20;
/** A burst of 429s (all the requests in flight answer at once) halves the window once, not once per answer. */
const DECREASE_EVERY_MS = 250;
/** A 429 without retry-after pauses the upstream's batch dispatch this long. */
const DEFAULT_PAUSE_MS = 1000;
/** Upstreams whose state fits in the shared memory. */
export const MAX_UPSTREAMS = 256;

/** The shared memory of the health state, handed to every batch Worker. */
export interface HealthMemory {
  cells: Int32Array;
  times: Float64Array;
}

export function newHealthMemory(): HealthMemory {
  const mem = { cells: new Int32Array(new SharedArrayBuffer(4 * HEALTH_CELLS * MAX_UPSTREAMS)), times: new Float64Array(new SharedArrayBuffer(8 * TIME_CELLS * MAX_UPSTREAMS)) };
  for (let i = 0; i < MAX_UPSTREAMS; i++) Atomics.store(mem.cells, i * HEALTH_CELLS + WINDOW, OPEN_WINDOW);
  return mem;
}

// ── what every thread does (pure functions on the shared memory) ─────────

const c = (u: number, cell: number) => u * HEALTH_CELLS + cell;

export const UP = 0;
export const DOWN = 1;
export const SUSPECT = 2;

export const stateOf = (mem: HealthMemory, u: number): number => Atomics.load(mem.cells, c(u, STATE));
/** Confirmed down (a probe failed too). */
export const isDown = (mem: HealthMemory, u: number): boolean => stateOf(mem, u) === DOWN;
/** Up: batch requests may start. */
export const isUp = (mem: HealthMemory, u: number): boolean => stateOf(mem, u) === UP;
export const epochOf = (mem: HealthMemory, u: number): number => Atomics.load(mem.cells, c(u, EPOCH));

/** An answer that is about the request, not the upstream's reachability: the failure streak ends. */
export function reportAnswer(mem: HealthMemory, u: number): void {
  if (Atomics.load(mem.cells, c(u, FAILS)) !== 0) Atomics.store(mem.cells, c(u, FAILS), 0);
}

/** A success: the streak ends, and a window held down by 429s grows back (+1 per window's worth of successes while it binds). */
export function reportSuccess(mem: HealthMemory, u: number, batch: boolean): void {
  reportAnswer(mem, u);
  if (!batch) return;
  const window = Atomics.load(mem.cells, c(u, WINDOW));
  if (window >= OPEN_WINDOW || Atomics.load(mem.cells, c(u, WINDOW_IN_FLIGHT)) < window - 1) return;
  if (Atomics.add(mem.cells, c(u, GROWTH), 1) + 1 >= window) {
    Atomics.store(mem.cells, c(u, GROWTH), 0);
    Atomics.compareExchange(mem.cells, c(u, WINDOW), window, window + 1);
  }
}

/** A failure as a whole; true if this one made the upstream suspect (the caller then tells the main thread, which probes). */
export function reportFailure(mem: HealthMemory, u: number): boolean {
  const n = Atomics.add(mem.cells, c(u, FAILS), 1) + 1;
  if (n < FAIL_THRESHOLD) return false;
  return Atomics.compareExchange(mem.cells, c(u, STATE), UP, SUSPECT) === UP;
}

/** A 429: halve the batch window (once per burst) and pause the upstream's batch dispatch for `retryAfterMs`. */
export function report429(mem: HealthMemory, u: number, retryAfterMs: number | null, now = Date.now()): void {
  reportAnswer(mem, u);
  const t = u * TIME_CELLS;
  const pause = now + Math.min(retryAfterMs ?? DEFAULT_PAUSE_MS, 60_000);
  if (pause > mem.times[t + PAUSE_UNTIL]!) mem.times[t + PAUSE_UNTIL] = pause;
  if (now - mem.times[t + LAST_DECREASE]! < DECREASE_EVERY_MS) return;
  mem.times[t + LAST_DECREASE] = now;
  const window = Atomics.load(mem.cells, c(u, WINDOW));
  // From an open window, halve what was really in flight (counting this request).
  const base = Math.min(window, Atomics.load(mem.cells, c(u, WINDOW_IN_FLIGHT)) + 1);
  Atomics.store(mem.cells, c(u, WINDOW), Math.max(1, base >> 1));
  Atomics.store(mem.cells, c(u, GROWTH), 0);
}

/** ms until the upstream's batch dispatch may resume after a 429 (0: now). */
export function pausedFor(mem: HealthMemory, u: number, now = Date.now()): number {
  return Math.max(0, mem.times[u * TIME_CELLS + PAUSE_UNTIL]! - now);
}

/** Whether the upstream's batch dispatch is held back by 429s now: paused (retry-after), or a 429 came within `withinMs` (a batch's status_details, docs/CONTRACT.md §18). */
export function rateLimitedNow(mem: HealthMemory, u: number, withinMs: number, now = Date.now()): boolean {
  const t = u * TIME_CELLS;
  return mem.times[t + PAUSE_UNTIL]! > now || now - mem.times[t + LAST_DECREASE]! < withinMs;
}

/** Takes a place in the upstream's batch window if one is free. */
export function tryEnterWindow(mem: HealthMemory, u: number): boolean {
  const limit = Atomics.load(mem.cells, c(u, WINDOW));
  for (;;) {
    const cur = Atomics.load(mem.cells, c(u, WINDOW_IN_FLIGHT));
    if (cur >= limit) return false;
    if (Atomics.compareExchange(mem.cells, c(u, WINDOW_IN_FLIGHT), cur, cur + 1) === cur) return true;
  }
}

export function leaveWindow(mem: HealthMemory, u: number): void {
  Atomics.sub(mem.cells, c(u, WINDOW_IN_FLIGHT), 1);
}

/** The batch window (null: not limited by 429s) and what is in flight under it. */
export function windowOf(mem: HealthMemory, u: number): { window: number | null; inFlight: number } {
  const w = Atomics.load(mem.cells, c(u, WINDOW));
  return { window: w >= OPEN_WINDOW ? null : w, inFlight: Atomics.load(mem.cells, c(u, WINDOW_IN_FLIGHT)) };
}

/**
 * Reports a call's fate (./fate.ts) to the upstream's health: an answer ends
 * the failure streak (a batch one also lets a window held down by 429s grow
 * back), an engine failure adds to it, a 429 slows the batch dispatch. True
 * if this report made the upstream suspect: the caller then has it probed.
 */
export function reportFate(mem: HealthMemory, u: number, fate: Fate, batch: boolean): boolean {
  switch (fate.kind) {
    case "answer":
      reportSuccess(mem, u, batch);
      return false;
    case "engine_failure":
      return reportFailure(mem, u);
    case "rate_limited":
      report429(mem, u, fate.retryAfterMs);
      return false;
    case "cancelled":
      return false;
    default:
      reportAnswer(mem, u);
      return false;
  }
}

/** Main thread only: a probe or discovery failed. True if the upstream was not down before. */
export function markDown(mem: HealthMemory, u: number): boolean {
  Atomics.store(mem.cells, c(u, FAILS), FAIL_THRESHOLD);
  if (Atomics.exchange(mem.cells, c(u, STATE), DOWN) === DOWN) return false;
  Atomics.add(mem.cells, c(u, EPOCH), 1);
  return true;
}

/** Main thread only: the upstream answered a probe or discovery. Returns the state it was in. */
export function markUp(mem: HealthMemory, u: number): number {
  Atomics.store(mem.cells, c(u, FAILS), 0);
  return Atomics.exchange(mem.cells, c(u, STATE), UP);
}

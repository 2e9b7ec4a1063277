// Worker side of upstream health (inference/upstream/health.ts): before each
// attempt, a batch request waits here until its upstream is up, its 429
// pause (retry-after) is over and its batch window has room. Waiting costs
// one timer per Worker, not one per request: every waiter re-checks the
// shared state on each tick, or at once when this Worker frees a place.
import { SUSPECT, isDown, isUp, leaveWindow, pausedFor, stateOf, tryEnterWindow, windowOf, type HealthMemory } from "../../inference/upstream/health";
import type { FromWorker } from "../types";

/** How often waiters look at the shared state: the delay between an upstream's return and the first request. */
const POLL_MS = 20;

let mem: HealthMemory | null = null;
let post: (m: FromWorker) => void = () => {};
const waiters = new Set<() => void>();
let timer: ReturnType<typeof setInterval> | null = null;

export function initGate(memory: HealthMemory, poster: (m: FromWorker) => void): void {
  mem = memory;
  post = poster;
}

export function healthMemory(): HealthMemory | null {
  return mem;
}

/** This Worker's request made the upstream suspect: the main thread probes it at once. */
export function tellSuspect(upstream: number, error: string): void {
  post({ type: "upstream_down", upstream, error });
}

/** Waits while upstream `u` is suspect (its probe is deciding whether it is down), or until `stopped()`. */
export async function settled(u: number, stopped: () => boolean): Promise<void> {
  while (mem && u >= 0 && stateOf(mem, u) === SUSPECT && !stopped()) await waitTick();
}

function wakeAll(): void {
  if (waiters.size === 0) return;
  const list = [...waiters];
  waiters.clear();
  for (const w of list) w();
}

function waitTick(): Promise<void> {
  timer ??= setInterval(() => {
    wakeAll();
    if (waiters.size === 0 && timer) {
      clearInterval(timer);
      timer = null;
    }
  }, POLL_MS);
  return new Promise((r) => waiters.add(r));
}

export type GateResult =
  /** The upstream looked ready. `waitedDown`: it was down while this waited. */
  | { go: true; waitedDown: boolean }
  /** `stopped()` became true while waiting; `down`: the upstream is down now. */
  | { go: false; down: boolean };

const windowHasRoom = (m: HealthMemory, u: number) => {
  const w = windowOf(m, u);
  return w.window === null || w.inFlight < w.window;
};

/** The gate's answer when nothing had to wait (the common case: no promise, no allocation). */
export const READY: GateResult = { go: true, waitedDown: false };

/** True when a batch request may go to upstream `u` now (checked again by `claim`). */
export function ready(u: number): boolean {
  if (!mem || u < 0) return true;
  return isUp(mem, u) && pausedFor(mem, u) === 0 && windowHasRoom(mem, u);
}

/**
 * Waits until upstream `u` looks ready for a batch request (up, not paused,
 * room in the window), or until `stopped()` — a cancel, an expiry, a
 * shutdown — says to give up. It takes nothing: the caller takes its
 * scheduler slot, then claims its place with `claim` (which checks again).
 */
export async function enterUpstream(u: number, stopped: () => boolean): Promise<GateResult> {
  if (!mem || u < 0) return { go: true, waitedDown: false };
  const m = mem;
  let waitedDown = false;
  for (;;) {
    if (stopped()) return { go: false, down: isDown(m, u) };
    if (isDown(m, u)) waitedDown = true;
    else if (isUp(m, u) && pausedFor(m, u) === 0 && windowHasRoom(m, u)) return { go: true, waitedDown };
    await waitTick();
  }
}

/**
 * Right before sending (after the wait for a scheduler slot, which can be
 * long): is the upstream still up and unpaused, and is there room in its
 * window? Takes the place and returns how to give it back, or null: then the
 * caller gives its slot back and waits at the gate again. (Checked again
 * here because a 429 may have paused the upstream while the line waited for
 * its slot.)
 */
export function claim(u: number): (() => void) | null {
  if (!mem || u < 0) return () => {};
  const m = mem;
  if (!isUp(m, u) || pausedFor(m, u) > 0 || !tryEnterWindow(m, u)) return null;
  let left = false;
  return () => {
    if (left) return;
    left = true;
    leaveWindow(m, u);
    // A place came free: this Worker's waiters may take it now (others' see it on their next tick).
    if (waiters.size > 0) queueMicrotask(wakeAll);
  };
}

/** Waits one poll tick (after a failed claim). */
export const nextTick = (): Promise<void> => waitTick();

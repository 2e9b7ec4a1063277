// Worker side of scheduler slots: a batch request on a model with a
// concurrency limit needs a slot from the main thread's scheduler, which
// serves interactive requests first.
//
// The fast path needs no message: while nobody waits in the scheduler for
// that model, the Worker takes a free slot straight from the shared count
// (one compare-and-swap, see inference/admission/scheduler.ts) and gives it back the
// same way, noting it in its own shared `held` count so the main thread can
// take the slots back if this Worker dies. When requests do wait there (an
// interactive one, or batch lines that found no free slot), the Worker asks
// the scheduler instead and waits its turn behind them; and when it frees a
// slot it took itself while someone waits, it asks the scheduler to hand
// the slot on. Asks, releases and those requests go as one message per
// turn of the event loop.
//
// Giving a slot back also counts, in the same shared cells, what its holder
// saw (a 2xx answer and how long the slot was held, or a 429/503): the
// adaptive controller on the main thread reads them (inference/admission/adaptive.ts).
// Measured here, not there, for granted slots too: the grant's and the
// release's messages would add their delay to every sample.
import { CAPPED, CELLS, IN_FLIGHT, LIMIT, WAITING, noteRelease, tryTakeSlot, type SlotOutcome } from "../../inference/admission/slotCells";
import type { FromWorker } from "../types";

/** Asks sent (or about to be) and not yet granted: each resumes its line, with a slot (true) or without (false: cancelled). */
const waiting = new Map<number, (granted: boolean) => void>();

let nextId = 1;
let post: (m: FromWorker) => void = () => {};
let cells: Int32Array | null = null;
let held: Int32Array | null = null;
let baseOf: (model: string) => number = () => -1;
let acquire: [number, string, string][] = [];
/** The batch whose shard this Worker runs: its asks carry it, so the scheduler serves them in the batch order (scheduling/order.ts). */
let currentBatch = "";

export function setSlotBatch(batchId: string): void {
  currentBatch = batchId;
}
let release: number[] = [];
let cancel: number[] = [];
let pump: string[] = [];
let scheduled = false;

export function initSlots(poster: (m: FromWorker) => void): void {
  post = poster;
}

export function setSharedSlots(slotCells: Int32Array, heldCounts: Int32Array, sharedBaseOf: (model: string) => number): void {
  cells = slotCells;
  held = heldCounts;
  baseOf = sharedBaseOf;
}

/** A limited model's limit on this node now (its max_concurrency, its share on a cluster, or what its controller found), or null where the Worker cannot see it (no shared cells). */
export function limitNow(model: string): number | null {
  const base = baseOf(model);
  return cells && base >= 0 ? Atomics.load(cells, base + LIMIT) : null;
}

export function onGrants(reqIds: number[]): void {
  for (const id of reqIds) {
    const resume = waiting.get(id);
    if (resume) {
      waiting.delete(id);
      resume(true);
    } else {
      // Ids are never reused: a grant for one nobody waits for is for an ask cancelled after it
      // was sent (the main thread granted it before it read the cancel, maybe after this Worker's
      // next task had begun). Its slot goes straight back.
      release.push(id);
      flushSoon();
    }
  }
}

/**
 * The shard is pausing (a shutdown, a yield) or stopped: its lines still
 * waiting for a slot stop waiting (their acquireSlot resolves with null),
 * rather than each waiting its turn for a slot it will not use: with many
 * lines queued behind a small limit that took seconds (runShard.ts,
 * boundFor). Asks not yet sent are dropped; sent ones are cancelled there.
 */
export function cancelAsks(): void {
  if (waiting.size === 0) return;
  const unsent = new Set(acquire.map((a) => a[0]));
  acquire = [];
  for (const [id, resume] of waiting) {
    if (!unsent.has(id)) cancel.push(id);
    resume(false);
  }
  waiting.clear();
  if (cancel.length > 0) flushSoon();
}

function flushSoon(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(() => {
    scheduled = false;
    const m: FromWorker = { type: "slots", acquire, release, pump, cancel };
    acquire = [];
    release = [];
    pump = [];
    cancel = [];
    post(m);
  });
}

/**
 * After taking a slot: if a request started waiting in the scheduler
 * meanwhile, give the slot back and ask the scheduler to hand it on (then
 * wait in line like everyone else). The scheduler publishes a waiter before
 * it looks for a free slot, and this looks for waiters after taking one, so
 * with these sequentially consistent atomics a waiter is never passed over.
 */
function keptAfterTake(c: Int32Array, base: number, model: string): boolean {
  if (Atomics.load(c, base + WAITING) === 0) return true;
  Atomics.sub(c, base + IN_FLIGHT, 1);
  pump.push(model);
  flushSoon();
  return false;
}

export type SlotRelease = (outcome?: SlotOutcome) => void;

/**
 * Resolves with a release function once a slot is taken or granted (the
 * release says what the request saw; nothing counted if left out), or with
 * null when the wait was cancelled (cancelAsks).
 */
export function acquireSlot(model: string): Promise<SlotRelease | null> {
  const base = baseOf(model);
  // Not while batches are held to a peak share (CAPPED): the cap is kept on the main thread.
  if (cells && held && base >= 0 && Atomics.load(cells, base + WAITING) === 0 && Atomics.load(cells, base + CAPPED) === 0 && tryTakeSlot(cells, base) && keptAfterTake(cells, base, model)) {
    const c = cells;
    const h = held;
    Atomics.add(h, base / CELLS, 1);
    const since = performance.now();
    let done = false;
    return Promise.resolve((outcome?: SlotOutcome) => {
      if (done) return;
      done = true;
      noteRelease(c, base, since, outcome);
      // This order: a Worker killed between the two leaks a slot rather than
      // letting the main thread give back one that was already given back.
      Atomics.sub(h, base / CELLS, 1);
      Atomics.sub(c, base + IN_FLIGHT, 1);
      // Someone waits in the scheduler (it could not see this slot free): let it hand the slot on.
      if (Atomics.load(c, base + WAITING) > 0) {
        pump.push(model);
        flushSoon();
      }
    });
  }
  const reqId = nextId++;
  const c = cells;
  return new Promise((resolve) => {
    waiting.set(reqId, (granted) => {
      if (!granted) return resolve(null);
      const since = performance.now();
      resolve((outcome?: SlotOutcome) => {
        if (c && base >= 0) noteRelease(c, base, since, outcome);
        release.push(reqId);
        flushSoon();
      });
    });
    acquire.push([reqId, model, currentBatch]);
    flushSoon();
  });
}

// The slot cells a limited model shares between the main thread's
// scheduler (./scheduler.ts) and the batch Workers (batches/worker/slots.ts):
// their layout, taking a slot with one compare-and-swap, and what a holder
// adds when it gives one back. Its own module, importing nothing, because a
// batch Worker loads it: a Worker must not load the scheduler, nor what the
// scheduler imports (each module a Worker loads costs it memory).

/** Per limited model, 7 cells in shared memory. */
export const CELLS = 7;
export const IN_FLIGHT = 0;
export const LIMIT = 1;
/** Requests waiting here (interactive and batch): Workers then do not take slots themselves, and one that frees a slot asks this thread to hand it on. */
export const WAITING = 2;
/** Slots given back after a 2xx answer (a count that wraps: readers take differences). */
export const ANSWERS = 3;
/** The time those slots were held, in tenths of a millisecond (wraps too: a window's difference fits easily). */
export const HELD = 4;
/** Slots given back after a 429 or 503 answer. */
export const OVERLOADS = 5;
/** 1 while batches are held to a peak share of this model (docs/CONTRACT.md §18 off-peak hours): Workers then take no slot themselves, every batch line asks this thread, which keeps the cap. */
export const CAPPED = 6;

/** What the holder of a slot saw, said when it gives the slot back. */
export const UNMEASURED = 0;
export const ANSWERED = 1;
export const OVERLOADED = 2;
export type SlotOutcome = typeof UNMEASURED | typeof ANSWERED | typeof OVERLOADED;

/** An upstream's answer status as the controller counts it: 2xx a sample, 429/503 overload, anything else nothing. */
export function slotOutcome(status: number): SlotOutcome {
  return status >= 200 && status < 300 ? ANSWERED : status === 429 || status === 503 ? OVERLOADED : UNMEASURED;
}

/** Adds a slot's outcome to a model's cells: two atomic adds at most. `since`: performance.now() when the slot was taken. */
export function noteRelease(cells: Int32Array, base: number, since: number, outcome: SlotOutcome | undefined): void {
  if (outcome === ANSWERED) {
    Atomics.add(cells, base + ANSWERS, 1);
    Atomics.add(cells, base + HELD, Math.round((performance.now() - since) * 10));
  } else if (outcome === OVERLOADED) Atomics.add(cells, base + OVERLOADS, 1);
}
/** Limited models whose slots are shared with Workers (more are served through this thread only). */
export const SHARED_MODELS = 1024;

/** Takes a slot if one is free: compare-and-swap on the shared count, so Workers and this thread never take the same one. */
export function tryTakeSlot(cells: Int32Array, base: number): boolean {
  const limit = Atomics.load(cells, base + LIMIT);
  for (;;) {
    const cur = Atomics.load(cells, base + IN_FLIGHT);
    if (cur >= limit) return false;
    if (Atomics.compareExchange(cells, base + IN_FLIGHT, cur, cur + 1) === cur) return true;
  }
}

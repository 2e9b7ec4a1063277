// Worker side of scheduler slots: a batch request on a model with a
// concurrency limit asks the main thread's scheduler for a slot (which
// serves interactive requests first) and gives it back when done. Asks and
// releases wait for the end of the current turn and go as one message: at
// tens of thousands of lines a second, a message per ask and per release
// cost more than the requests themselves.
import type { FromWorker } from "../types";

const waiting = new Map<number, () => void>();
let nextId = 1;
let post: (m: FromWorker) => void = () => {};
let acquire: [number, string][] = [];
let release: number[] = [];
let scheduled = false;

export function initSlots(poster: (m: FromWorker) => void): void {
  post = poster;
}

export function onGrants(reqIds: number[]): void {
  for (const id of reqIds) {
    waiting.get(id)?.();
    waiting.delete(id);
  }
}

function flushSoon(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(() => {
    scheduled = false;
    const m: FromWorker = { type: "slots", acquire, release };
    acquire = [];
    release = [];
    post(m);
  });
}

/** Resolves with a release function once the scheduler grants a slot. */
export function acquireSlot(model: string): Promise<() => void> {
  const reqId = nextId++;
  return new Promise((resolve) => {
    waiting.set(reqId, () =>
      resolve(() => {
        release.push(reqId);
        flushSoon();
      }),
    );
    acquire.push([reqId, model]);
    flushSoon();
  });
}

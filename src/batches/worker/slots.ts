// Worker side of scheduler slots: a batch request on a model with a
// concurrency limit asks the main thread's scheduler for a slot (which
// serves interactive requests first) and gives it back when done.
import type { FromWorker } from "../types";

const waiting = new Map<number, () => void>();
let nextId = 1;
let post: (m: FromWorker) => void = () => {};

export function initSlots(poster: (m: FromWorker) => void): void {
  post = poster;
}

export function onGrant(reqId: number): void {
  waiting.get(reqId)?.();
  waiting.delete(reqId);
}

/** Resolves with a release function once the scheduler grants a slot. */
export function acquireSlot(model: string): Promise<() => void> {
  const reqId = nextId++;
  return new Promise((resolve) => {
    waiting.set(reqId, () => resolve(() => post({ type: "release", reqId })));
    post({ type: "acquire", reqId, model });
  });
}

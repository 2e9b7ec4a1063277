// This Worker's side of the turns at the CPU (../turns.ts): take one before
// CPU work, give it back when done or waiting. A Worker that gives its turn
// to a waiting one collects its heap first, so that a Worker that waits holds
// no garbage. Without cells (a Worker that was never given any) every take
// succeeds at once.
import { FREE, HOLDING, WAITERS, WAITING } from "../turns";
import { collect } from "./garbage";

/** Less work than this since the last collection is not worth one before a hand-over (a shard that mixes built-in and upstream lines gives its turn back at every wait). */
const HANDOVER_MIN_CHARS = 256 << 10;

let turns: Int32Array | null = null;
let mine: Int32Array | null = null;
let holding = false;

export function initTurns(cells: Int32Array, holder: Int32Array): void {
  turns = cells;
  mine = holder;
}

/** True while this Worker holds a turn. */
export function holdsTurn(): boolean {
  return holding;
}

function tryTake(): boolean {
  const t = turns!;
  for (let v = Atomics.load(t, FREE); v > 0; v = Atomics.load(t, FREE)) {
    if (Atomics.compareExchange(t, FREE, v, v - 1) === v) {
      holding = true;
      Atomics.store(mine!, HOLDING, 1);
      return true;
    }
  }
  return false;
}

/** The wait for a turn under way, if any: a shard and a validation on this Worker wait for one turn together (the Worker's cells count one waiter). */
let waiting: Promise<void> | null = null;

/**
 * Takes a turn: null if this Worker holds one now (already, or at once),
 * else a promise that resolves when it does. The wait does not block this
 * Worker's event loop: control messages (stop, checkpoint) still arrive.
 */
export function takeTurn(): Promise<void> | null {
  if (holding || !turns) return null;
  if (tryTake()) return null;
  return (waiting ??= waitForTurn().finally(() => (waiting = null)));
}

async function waitForTurn(): Promise<void> {
  const t = turns!;
  Atomics.store(mine!, WAITING, 1);
  Atomics.add(t, WAITERS, 1);
  try {
    while (!tryTake()) {
      // Wakes when a turn is given back (each give wakes one waiter; one
      // that finds the turn taken again by a Worker that did not wait waits
      // on, and that Worker's give wakes a waiter in turn), or after 100 ms
      // whatever happens: nothing depends on a wake-up arriving.
      const w = Atomics.waitAsync(t, FREE, 0, 100);
      if (w.async) await w.value;
    }
  } finally {
    if (Atomics.exchange(mine!, WAITING, 0) === 1) Atomics.sub(t, WAITERS, 1);
  }
}

/** Gives the turn back (if held); first collects this Worker's heap if another Worker waits for it. */
export function giveTurn(): void {
  if (!holding) return;
  const t = turns!;
  if (Atomics.load(t, WAITERS) > 0) collect(HANDOVER_MIN_CHARS, true);
  holding = false;
  if (Atomics.exchange(mine!, HOLDING, 0) === 1) {
    Atomics.add(t, FREE, 1);
    Atomics.notify(t, FREE, 1);
  }
}

// Turns at the CPU for batch Workers (docs/CONTRACT.md §20: memory does not grow with
// Workers). A busy batch Worker holds tens of MB that a waiting one need
// not: the garbage of the lines it parsed and wrote since its heap was last
// collected (docs/benchmarks/history.md: 25–31 MB of heap sampled in each busy
// Worker, against 3–4 MB for a whole idle Worker). Left to the kernel, with
// more Workers than cores every Worker is busy at once, taking turns on the
// cores and keeping its garbage while descheduled: 16 Workers on 2 cores
// peak at 702–749 MB for the 1M-line echo batch (bench/workers-rss.ts),
// 32–45 MB more for each Worker, and are no faster than 2.
//
// So CPU work goes by turns: a Worker takes one before it reads a shard
// (to validate it or run it) and gives it back when its task ends, or while
// it waits on upstream requests; if another Worker waits, it first collects
// its heap and hands the freed pages back (./worker/turns.ts). At most
// `count` Workers hold a turn, so at most that many hold a busy Worker's
// memory: with turns, 16 Workers on 2 cores peak at 256–263 MB, 5–6 MB more for
// each Worker past the 2 that run. Workers past the turns still help where
// the work waits (upstream requests): a Worker waiting on them holds none.
//
// The cells live in shared memory: [FREE] turns not taken, [WAITERS]
// Workers waiting for one. Each Worker has its own two cells, [HOLDING]
// and [WAITING], which the pool reads if the Worker dies, to give back what
// it held (./pool.ts).

export const FREE = 0;
export const WAITERS = 1;
export const HOLDING = 0;
export const WAITING = 1;

/** The shared cells of `count` turns, all free. */
export function newTurns(count: number): Int32Array {
  const cells = new Int32Array(new SharedArrayBuffer(8));
  cells[FREE] = Math.max(1, count);
  return cells;
}

/** One Worker's own cells (holding, waiting). */
export function newTurnHolder(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(8));
}

/** Gives back what a dead Worker held or was counted for; each exchange makes sure the Worker, if it still ran a moment, and this do not both give it back. */
export function reclaimTurn(turns: Int32Array, holder: Int32Array): void {
  if (Atomics.exchange(holder, WAITING, 0) === 1) Atomics.sub(turns, WAITERS, 1);
  if (Atomics.exchange(holder, HOLDING, 0) === 1) {
    Atomics.add(turns, FREE, 1);
    Atomics.notify(turns, FREE, 1);
  }
}

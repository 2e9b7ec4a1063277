// The prefixes open on each replica in the batch Workers' prefix windows
// (src/batches/worker/prefixGroups.ts), shared by every window: a replica
// works on a few prefixes at a time, as many as its engine's prefix cache
// keeps. Two shards of one batch (two Workers) often hold lines of the same
// prefix; counted once, they take one of the replica's places, not two, and
// once one window's group has computed the prefix on the engine (its first
// line answered), the other's lines go at once instead of sending one alone
// first: the engine has it cached.
//
// A table per replica in its shared cells (./cells.ts prefixTableOf): a
// lock and SLOTS entries of (key, windows holding it, warm). Only batch
// Workers change it, in a few steps under the lock.
import { PREFIX_TABLE_CELLS, prefixTableOf, type ReplicaCells } from "./cells";

const LOCK = 0;
const OVERFLOW = 1; // groups open beyond the table's entries (counted, not shared)
const ENTRY = 2; // then SLOTS × [key, refs, warm]
/** Entries per replica (8): room for twice the prefixes a replica works on at once (src/batches/worker/prefixGroups.ts OPEN_PER_REPLICA). */
const SLOTS = (PREFIX_TABLE_CELLS - ENTRY) / 3;

function locked<T>(cells: ReplicaCells, base: number, f: () => T): T {
  // Held for a few loads and stores by whichever thread: spinning costs less than any wait.
  while (Atomics.compareExchange(cells, base + LOCK, 0, 1) !== 0);
  try {
    return f();
  } finally {
    Atomics.store(cells, base + LOCK, 0);
  }
}

const entry = (base: number, i: number) => base + ENTRY + 3 * i;

/** A prefix key (an unsigned 32-bit hash) as the Int32 cells hold it: keys from 2^31 read back negative. */
const cellOf = (key: number): number => key | 0;

/** The entry of `key` on the table at `base`, or -1. */
function find(cells: ReplicaCells, base: number, key: number): number {
  const k = cellOf(key);
  for (let i = 0; i < SLOTS; i++) {
    const e = entry(base, i);
    if (cells[e + 1]! > 0 && cells[e] === k) return e;
  }
  return -1;
}

/** A window opens a group of prefix `key` on replica r. True when the prefix is warm there already (another window's group of it got its first answer). */
export function prefixOpened(cells: ReplicaCells, r: number, key: number): boolean {
  const base = prefixTableOf(r);
  return locked(cells, base, () => {
    const e = find(cells, base, key);
    if (e >= 0) {
      cells[e + 1]!++;
      return cells[e + 2] === 1;
    }
    for (let i = 0; i < SLOTS; i++) {
      const f = entry(base, i);
      if (cells[f + 1] === 0) {
        cells[f] = cellOf(key);
        cells[f + 1] = 1;
        cells[f + 2] = 0;
        return false;
      }
    }
    cells[base + OVERFLOW]!++;
    return false;
  });
}

/** A window's group of prefix `key` on replica r closed (emptied, moved, or the window left). */
export function prefixClosed(cells: ReplicaCells, r: number, key: number): void {
  const base = prefixTableOf(r);
  locked(cells, base, () => {
    const e = find(cells, base, key);
    if (e >= 0) cells[e + 1]!--;
    else if (cells[base + OVERFLOW]! > 0) cells[base + OVERFLOW]!--;
  });
}

/** The first line of a group of prefix `key` on replica r was answered: the engine has computed the prefix. */
export function prefixWarmed(cells: ReplicaCells, r: number, key: number): void {
  const base = prefixTableOf(r);
  locked(cells, base, () => {
    const e = find(cells, base, key);
    if (e >= 0) cells[e + 2] = 1;
  });
}

/** The prefixes open on replica r, every window counted once per prefix. */
export function prefixesOn(cells: ReplicaCells, r: number): number {
  const base = prefixTableOf(r);
  let n = Atomics.load(cells, base + OVERFLOW);
  for (let i = 0; i < SLOTS; i++) if (Atomics.load(cells, entry(base, i) + 1) > 0) n++;
  return n;
}

/** Prefix `key` on replica r now: 0 not open in any window, 1 open, 2 open and warm (a group of it had its first answer). */
export function prefixStateOn(cells: ReplicaCells, r: number, key: number): 0 | 1 | 2 {
  const base = prefixTableOf(r);
  for (let i = 0; i < SLOTS; i++) {
    const e = entry(base, i);
    if (Atomics.load(cells, e + 1) > 0 && Atomics.load(cells, e) === cellOf(key)) return Atomics.load(cells, e + 2) === 1 ? 2 : 1;
  }
  return 0;
}

/** The prefixes open on replica r in some window now (keys as given, unsigned). */
export function prefixKeysOn(cells: ReplicaCells, r: number): number[] {
  const base = prefixTableOf(r);
  const keys: number[] = [];
  for (let i = 0; i < SLOTS; i++) {
    const e = entry(base, i);
    if (Atomics.load(cells, e + 1) > 0) keys.push(Atomics.load(cells, e) >>> 0);
  }
  return keys;
}

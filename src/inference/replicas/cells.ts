// The state of every replica that all threads share (docs/CONTRACT.md §21):
// requests in flight (the first load signal of the dispatch), whether its
// circuit breaker is open, its failure streak, and counters for /metrics and
// the console. Every request reads and adds with atomics: no message per
// request. The main thread assigns each replica its index once (a replica
// keeps it while the process runs) and owns the breaker's recovery (a
// probe closes it, ./set.ts); any thread may open it.
//
// Imports nothing: a batch Worker loads it.

/** Int32 cells per replica. */
export const REPLICA_CELLS = 14 + 26; // the cells below, then the table of open prefixes (PREFIX_TABLE_CELLS)
/** When each replica's engine load was read (ms since epoch; plain reads: a torn value only ages a reading). */
export type EngineTimes = Float64Array;
const IN_FLIGHT = 0;
const OPEN = 1; // 1: left out of dispatch (failures in a row), until a probe answers
const FAILS = 2; // failures as a whole in a row
const REQUESTS = 3; // requests sent (wraps: readers take differences)
const FAILURES = 4; // failures as a whole
const ANSWERS = 5; // 2xx answers
const HELD = 6; // time those answers took, in ms (wraps)
const ENGINE_LOAD = 7; // requests the engine itself reports running and waiting (its /metrics), all clients'; -1: unknown
// 8: unused
const PLACED = 9; // batch lines a prefix window placed on it that have not ended (waiting for a slot, or in flight)
const OVERLOADS = 10; // 429 and 503 answers (wraps): its adaptive controller cuts its limit
const LIMIT = 11; // the limit its adaptive controller found (./limits.ts); 0: none (a number configured, or one replica)
const WANTED = 12; // times a request or line wanted it and found it at its limit since its controller last looked
const KV_CACHE = 13; // its engine's KV cache use in thousandths (its /metrics, read with ENGINE_LOAD); -1: unknown
// 14 and on: the prefixes open on it in the batch Workers' windows (./openPrefixes.ts).
const PREFIX_TABLE = 14;
/** Cells of a replica's table of open prefixes: a lock, an overflow count, and 8 entries of 3. */
export const PREFIX_TABLE_CELLS = REPLICA_CELLS - PREFIX_TABLE;
/** Where replica r's table of open prefixes starts (./openPrefixes.ts). */
export const prefixTableOf = (r: number): number => r * REPLICA_CELLS + PREFIX_TABLE;

/** Where a replica's answers, their time (ms) and its overloads are, for its adaptive controller's meter (src/inference/admission/windowMeter.ts). */
export const REPLICA_METER = { answers: ANSWERS, held: HELD, overloads: OVERLOADS, heldPerMs: 1 } as const;
/** Where replica r's cells start. */
export const replicaBase = (r: number): number => r * REPLICA_CELLS;

/** Failures as a whole in a row that open a replica's breaker. */
export const REPLICA_FAIL_THRESHOLD = 3;
/** Replicas whose state fits in the shared memory (indexes are never reused while the process runs). */
export const MAX_REPLICAS = 1024;

export type ReplicaCells = Int32Array;

export const newReplicaCells = (): ReplicaCells => new Int32Array(new SharedArrayBuffer(4 * REPLICA_CELLS * MAX_REPLICAS));
export const newEngineTimes = (): EngineTimes => new Float64Array(new SharedArrayBuffer(8 * MAX_REPLICAS));

const at = (r: number, cell: number) => r * REPLICA_CELLS + cell;

export const inFlightOf = (cells: ReplicaCells, r: number): number => Atomics.load(cells, at(r, IN_FLIGHT));

/** A reading of the engine's load older than this is unknown (docs/CONTRACT.md §21). */
export const ENGINE_LOAD_MAX_AGE_MS = 5000;

/** The engine's own count of requests running and waiting (every client's, every node's), or -1 when unknown or stale. */
export function engineLoadOf(cells: ReplicaCells, times: EngineTimes | null, r: number, now = Date.now()): number {
  if (!times || now - times[r]! > ENGINE_LOAD_MAX_AGE_MS) return -1;
  return Atomics.load(cells, at(r, ENGINE_LOAD));
}

/** Main thread: the engine said it runs and holds `load` requests, and how full its KV cache is (0–1, null: it does not say). */
export function setEngineLoad(cells: ReplicaCells, times: EngineTimes, r: number, load: number, kvCache: number | null = null, now = Date.now()): void {
  Atomics.store(cells, at(r, ENGINE_LOAD), load);
  Atomics.store(cells, at(r, KV_CACHE), kvCache === null ? -1 : Math.round(kvCache * 1000));
  times[r] = now;
}

/** The engine's KV cache use (0–1), or null when unknown or stale. */
export function kvCacheOf(cells: ReplicaCells, times: EngineTimes | null, r: number, now = Date.now()): number | null {
  if (!times || now - times[r]! > ENGINE_LOAD_MAX_AGE_MS) return null;
  const v = Atomics.load(cells, at(r, KV_CACHE));
  return v < 0 ? null : v / 1000;
}

/** A replica's load for the dispatch: its requests in flight from here, or the engine's own count when that is known and larger (other nodes' and clients' requests). */
export function loadOf(cells: ReplicaCells, times: EngineTimes | null, r: number, now = times ? Date.now() : 0): number {
  const own = inFlightOf(cells, r);
  const engine = times ? engineLoadOf(cells, times, r, now) : -1;
  return engine > own ? engine : own;
}
export const isOpen = (cells: ReplicaCells, r: number): boolean => Atomics.load(cells, at(r, OPEN)) === 1;


/**
 * Batch lines placed on replica r by every shard's prefix window and not
 * ended yet. A line is placed when its window picks it, before it waits for
 * the model's slot; counting it only once its request goes out let a window
 * pick a whole group for one replica in one turn (dozens queued inside that
 * engine while others idled).
 */
export const placedOn = (cells: ReplicaCells, r: number): number => Atomics.load(cells, at(r, PLACED));
export const linePlaced = (cells: ReplicaCells, r: number): void => void Atomics.add(cells, at(r, PLACED), 1);
export const lineEnded = (cells: ReplicaCells, r: number): void => void Atomics.sub(cells, at(r, PLACED), 1);

/**
 * How many requests replica `r` takes at once now: its own max_concurrency,
 * else the limit its adaptive controller found; 0 when neither (the
 * model's limit still bounds the total).
 */
export const limitNow = (cells: ReplicaCells, r: { idx: number; limit: number }): number => (r.limit > 0 ? r.limit : Atomics.load(cells, at(r.idx, LIMIT)));
export const setAdaptiveLimit = (cells: ReplicaCells, r: number, limit: number): void => void Atomics.store(cells, at(r, LIMIT), limit);
/** A request or a line wanted replica r and found it at its limit: the limit binds (its controller may try a higher one). */
export const wantedFull = (cells: ReplicaCells, r: number): void => void Atomics.add(cells, at(r, WANTED), 1);
/** The count of wantedFull() calls since it was last set (its controller's meter reads it, then sets it to 0). */
export const wantedOf = (cells: ReplicaCells, r: number): number => Atomics.load(cells, at(r, WANTED));
export const setWanted = (cells: ReplicaCells, r: number, n: number): void => void Atomics.store(cells, at(r, WANTED), n);

/** A request starts on replica r. */
export function enter(cells: ReplicaCells, r: number): void {
  Atomics.add(cells, at(r, IN_FLIGHT), 1);
  Atomics.add(cells, at(r, REQUESTS), 1);
}

/**
 * A request on replica r ended: `ok` an answer from the engine (any status
 * that is about the request), else a failure as a whole (no connection, a
 * timeout, 502/503/504); `answered`: a 2xx, whose time counts toward the
 * replica's latency. `breaker`: whether failures may open the replica's
 * breaker (not for an upstream's only replica: its health is the
 * upstream's). `overloaded`: a 429 or 503 (its controller cuts its limit). True if this failure opened it (the main thread probes it).
 */
export function leave(cells: ReplicaCells, r: number, ok: boolean, heldMs: number, answered: boolean, breaker: boolean, overloaded = false): boolean {
  Atomics.sub(cells, at(r, IN_FLIGHT), 1);
  if (overloaded) Atomics.add(cells, at(r, OVERLOADS), 1);
  if (ok) {
    if (Atomics.load(cells, at(r, FAILS)) !== 0) Atomics.store(cells, at(r, FAILS), 0);
    if (answered) {
      Atomics.add(cells, at(r, ANSWERS), 1);
      Atomics.add(cells, at(r, HELD), Math.round(heldMs));
    }
    return false;
  }
  Atomics.add(cells, at(r, FAILURES), 1);
  if (Atomics.add(cells, at(r, FAILS), 1) + 1 < REPLICA_FAIL_THRESHOLD || !breaker) return false;
  return Atomics.compareExchange(cells, at(r, OPEN), 0, 1) === 0;
}

/** Main thread only: a probe answered (or the replica is new): back in the dispatch. */
export function close(cells: ReplicaCells, r: number): void {
  Atomics.store(cells, at(r, FAILS), 0);
  Atomics.store(cells, at(r, OPEN), 0);
}

/** Main thread only: a probe failed. */
export function open(cells: ReplicaCells, r: number): void {
  Atomics.store(cells, at(r, OPEN), 1);
}

export interface ReplicaCounters {
  inFlight: number;
  open: boolean;
  requests: number;
  failures: number;
  answers: number;
  heldMs: number;
}

export function countersOf(cells: ReplicaCells, r: number): ReplicaCounters {
  return {
    inFlight: inFlightOf(cells, r),
    open: isOpen(cells, r),
    requests: Atomics.load(cells, at(r, REQUESTS)) >>> 0,
    failures: Atomics.load(cells, at(r, FAILURES)) >>> 0,
    answers: Atomics.load(cells, at(r, ANSWERS)) >>> 0,
    heldMs: Atomics.load(cells, at(r, HELD)) >>> 0,
  };
}

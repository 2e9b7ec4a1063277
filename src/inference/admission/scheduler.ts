// One scheduler per process decides who may use a model's capacity.
// Interactive requests go first; batch lines ("off-peak") get a slot only
// when no interactive request is waiting, so batches use what interactive
// traffic leaves free. A model without a limit (a built-in, unless one is
// configured) needs no slots. A full interactive queue answers 529 at once.
//
// A limited model's slot count lives in memory shared with the batch Workers
// (`sharedCells`), so a Worker can take a free slot with one atomic operation
// instead of a round trip to this thread per line — but only while nobody
// waits here for that model (see batches/worker/slots.ts). Everything that
// waits still waits here, in order, interactive first.
//
// The same cells count what the slots' holders saw (answers, the time the
// slots were held, 429/503 answers): whoever gives a slot back adds to them,
// a Worker included. A model with max_concurrency "auto" has a controller
// (./admission/adaptive.ts) that reads them every window and sets the limit; the
// interactive requests keep their priority within whatever limit it finds.
// Per request that costs a performance.now() at each end and two atomic
// adds; the reading is a timer here (TICK_MS), a few loads per model.
import { ApiError } from "../../errors";
import { AdaptiveLimit } from "./adaptive";
import type { ModelEntry } from "../registry";
import { BatchQueue, type BatchKey } from "../../scheduling/order";
import { partInTurn } from "../../nodes/parts";

interface Waiter {
  grant: () => void;
  cancelled: boolean;
  /** A batch line's place in the batch order (scheduling/order.ts); none for interactive requests. */
  key?: BatchKey;
  /** Granted as a capped line (counted in cappedInFlight until released). */
  capped?: boolean;
}

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

/** How often the controllers' cells are read (a few atomic loads per model). */
const TICK_MS = 50;
/** A window lasts at least this, and at least one mean latency… */
const MIN_WINDOW_MS = 200;
/** …and holds this many answers, unless it has waited MAX_WINDOW_MS (or 2 latencies) for them. */
const MIN_SAMPLES = 32;
const MAX_WINDOW_MS = 2000;
/** After a change, what was measured for one mean latency (at most this) is not counted: those requests began under the old limit. */
const MAX_SETTLE_MS = 30_000;
/** A tick this much late (or a tenth of the latency, if more) means this process was held: the window is not counted (WindowMeter). */
const STALL_MS = 10;

class ModelLane {
  private localInFlight = 0;
  /** Slots held by interactive requests (the rest of inFlight are batch lines). */
  interactiveInFlight = 0;
  /** Requests that had to wait here for want of a slot since the controller last looked: the limit was binding. */
  pressure = 0;
  readonly interactive: Waiter[] = [];
  /** Batch lines, in the batch order: earliest deadline hour, then projects in turn, then their batches (scheduling/order.ts). */
  readonly batch = new BatchQueue<Waiter>();
  /** The share of the limit that capped batches may hold now (1: no cap; off-peak hours). */
  share = 1;
  /** Slots held by lines of capped batches (granted here: while a cap is in force Workers take none themselves). */
  cappedInFlight = 0;
  /** Where releases count what they saw: the shared cells, or (a limited model past SHARED_MODELS) cells of its own. */
  readonly meter: { cells: Int32Array; base: number } | null;
  constructor(
    /** The model's max_concurrency; on a cluster, this node's share of it (setLimit). Adaptive: the controller's limit now. */
    public limit: number | null,
    readonly queueSize: number,
    /** The shared cells of this model (limited models only), and where they start. */
    private readonly shared: { cells: Int32Array; base: number } | null,
    /** For max_concurrency "auto": the controller that sets `limit`. */
    readonly adaptive: AdaptiveLimit | null = null,
    /** A fixed max_concurrency: the cluster's limit, of which `limit` is this node's part. Null for "auto" or unlimited. */
    readonly clusterLimit: number | null = null,
  ) {
    if (shared && limit !== null) Atomics.store(shared.cells, shared.base + LIMIT, limit);
    this.meter = shared ?? (limit !== null ? { cells: new Int32Array(CELLS), base: 0 } : null);
  }

  get sharedBase(): number {
    return this.shared ? this.shared.base : -1;
  }

  /** Whether batch Workers give this lane's slots back themselves (and count what they saw in its cells). */
  get sharedWithWorkers(): boolean {
    return this.shared !== null;
  }

  get inFlight(): number {
    return this.shared ? Atomics.load(this.shared.cells, this.shared.base + IN_FLIGHT) : this.localInFlight;
  }

  get queued(): number {
    return this.interactive.length;
  }

  tryTake(): boolean {
    if (this.limit === null) {
      this.localInFlight++;
      return true;
    }
    if (this.shared) return tryTakeSlot(this.shared.cells, this.shared.base);
    if (this.localInFlight >= this.limit) return false;
    this.localInFlight++;
    return true;
  }

  give(n = 1): void {
    if (this.shared) Atomics.sub(this.shared.cells, this.shared.base + IN_FLIGHT, n);
    else this.localInFlight -= n;
  }

  /** Publishes how many wait here, which Workers look at before taking a slot themselves. */
  publish(): void {
    if (this.shared) Atomics.store(this.shared.cells, this.shared.base + WAITING, this.interactive.length + this.batch.length);
  }

  /** A new limit (a cluster's share changed, or the controller's): takes beyond it wait until enough slots are given back. */
  setLimit(limit: number): void {
    this.limit = limit;
    if (this.shared) Atomics.store(this.shared.cells, this.shared.base + LIMIT, limit);
    this.pump();
  }

  /**
   * Slots capped batches may hold now in the whole cluster: ceil(share × the
   * model's limit), at least 1; null when nothing is capped. The limit is
   * the cluster's: max_concurrency for a fixed one, this node's limit times
   * the live nodes for "auto" (each node's controller finds its own).
   */
  get clusterCap(): number | null {
    if (this.share >= 1 || this.limit === null) return null;
    const total = this.clusterLimit ?? this.limit * this.place.count;
    return Math.max(1, Math.ceil(this.share * total));
  }

  /**
   * This node's part of the cluster's cap: split evenly over the live nodes
   * in whole parts that add up to it (so 3 nodes with a limit of 8 at 25%
   * hold 2 in all, not a rounded-up 1 each). The odd parts go to the nodes
   * in turn (`place.turn`, a minute's number, the same on every node), so a
   * capped batch whose shards all run on a node without a part this minute
   * waits at most the minutes it takes the turn to come round. Alone, this
   * node's part is the whole cap.
   */
  get cap(): number | null {
    const all = this.clusterCap;
    if (all === null) return null;
    const { index, count, turn } = this.place;
    return partInTurn(all, index, count, turn);
  }

  /** This node among the live ones (Scheduler.setPlace). */
  place = { index: 0, count: 1, turn: 0 };

  /** A new place or turn: while capped, this node's part of the cap may have grown, so waiters may go. */
  setPlace(place: { index: number; count: number; turn: number }): void {
    this.place = place;
    if (this.share < 1) this.pump();
  }

  setShare(share: number): void {
    this.share = share;
    if (this.shared) Atomics.store(this.shared.cells, this.shared.base + CAPPED, this.cap === null ? 0 : 1);
    this.pump();
  }

  /** Whether a batch waiter may have a slot now (a capped batch only below the cap). */
  mayGrant(w: Waiter): boolean {
    if (!w.key?.capped) return true;
    const cap = this.cap;
    return cap === null || this.cappedInFlight < cap;
  }

  /** Hands free slots to waiters, interactive first, then batch lines in the batch order. */
  pump(): void {
    for (;;) {
      const w = shiftLive(this.interactive);
      if (w) {
        if (!this.tryTake()) {
          this.interactive.unshift(w);
          break;
        }
        w.grant();
        continue;
      }
      if (this.batch.length === 0 || !this.tryTake()) break;
      const b = this.batch.take((x) => this.mayGrant(x));
      if (!b) {
        this.give();
        break;
      }
      // Counted now, not when the waiter runs: this loop may grant more at once.
      if (b.key?.capped) {
        this.cappedInFlight++;
        b.capped = true;
      }
      b.grant();
    }
    this.publish();
  }
}

/**
 * Turns an adaptive lane's cells into the controller's windows: differences
 * of the counts since the last tick, summed until the window is long enough
 * and holds enough answers; then the controller's limit goes into the lane.
 */
class WindowMeter {
  private answers: number;
  private held: number;
  private overloads: number;
  private sum = { answers: 0, held: 0, overloads: 0 };
  private binding = false;
  /** The latest a tick of this window came (ms): this thread, and so the process, was held that long. */
  private maxLateMs = 0;
  private start: number;
  private settleUntil = 0;

  constructor(
    private readonly lane: ModelLane,
    private readonly ctl: AdaptiveLimit,
    now: number,
  ) {
    const { cells, base } = lane.meter!;
    this.answers = Atomics.load(cells, base + ANSWERS);
    this.held = Atomics.load(cells, base + HELD);
    this.overloads = Atomics.load(cells, base + OVERLOADS);
    this.start = now;
  }

  /** `lateMs`: how late this tick came (the timer's; 0 when a test ticks). */
  tick(now: number, lateMs = 0): void {
    const lane = this.lane;
    const { cells, base } = lane.meter!;
    const answers = Atomics.load(cells, base + ANSWERS);
    const held = Atomics.load(cells, base + HELD);
    const overloads = Atomics.load(cells, base + OVERLOADS);
    // Int32 counts wrap: a difference taken as Int32 is right across the wrap.
    const dA = (answers - this.answers) | 0;
    const dH = (held - this.held) | 0;
    const dO = (overloads - this.overloads) | 0;
    this.answers = answers;
    this.held = held;
    this.overloads = overloads;
    const binding = lane.pressure > 0 || (lane.limit !== null && lane.inFlight >= lane.limit);
    lane.pressure = 0;
    if (now < this.settleUntil) return;
    this.sum.answers += dA;
    this.sum.held += dH;
    this.sum.overloads += dO;
    this.binding ||= binding;
    const latency = this.ctl.latencyMs ?? 0;
    this.maxLateMs = Math.max(this.maxLateMs, lateMs);
    const elapsed = now - this.start;
    const long = elapsed >= Math.max(MIN_WINDOW_MS, latency);
    // A 429/503 is acted on at once; otherwise a window needs its length and its answers.
    if (this.sum.overloads === 0 && !(long && (this.sum.answers >= MIN_SAMPLES || elapsed >= Math.max(MAX_WINDOW_MS, 2 * latency)))) return;
    const { answers: n, held: h, overloads: o } = this.sum;
    const wasBinding = this.binding;
    const meanMs = n > 0 ? h / 10 / n : 0;
    // Held here, this process was held everywhere (a busy machine, a GC, a
    // container's CPU quota): the answers that came meanwhile were seen
    // late, and their slots look held longer than the engine took. A hold of
    // more than a tenth of the latency (the controller's, or before it knows
    // one, this window's own) makes the window not the engine's. Judged
    // against the latency, not a fixed time: under a CPU quota every window
    // has holds of tens of ms, which a 1 s latency hardly notices, and a
    // fixed bound would leave the controller at its start for good.
    const stalled = this.maxLateMs > Math.max(STALL_MS, (this.ctl.latencyMs ?? meanMs) / 10);
    this.sum = { answers: 0, held: 0, overloads: 0 };
    this.binding = false;
    this.maxLateMs = 0;
    this.start = now;
    if ((n === 0 && o === 0) || (stalled && o === 0)) return;
    const limit = this.ctl.update({ at: now, completions: n, latencyMs: meanMs, overloads: o, binding: wasBinding });
    if (limit !== lane.limit) {
      lane.setLimit(limit);
      this.settleUntil = now + Math.min(this.ctl.latencyMs ?? 0, MAX_SETTLE_MS);
      this.start = this.settleUntil;
    }
  }
}

function shiftLive(q: Waiter[]): Waiter | undefined {
  while (q.length) {
    const w = q.shift()!;
    if (!w.cancelled) return w;
  }
  return undefined;
}

/** Gives a slot back; `outcome` says what its holder saw (nothing counted when left out). */
export type Release = (outcome?: SlotOutcome) => void;

/** What an adaptive model's controller knows (GET /metrics, the benchmark). */
export interface AdaptiveState {
  limit: number;
  /** max_concurrency_limit, or this node's share of it. */
  ceiling: number;
  latencyMs: number | null;
  floorMs: number | null;
  decision: string;
  trace: AdaptiveLimit["trace"];
}

export class Scheduler {
  private readonly lanes = new Map<string, ModelLane>();
  /** CELLS Int32 per limited model, shared with the batch Workers. */
  readonly sharedCells = new Int32Array(new SharedArrayBuffer(4 * CELLS * SHARED_MODELS));
  private sharedUsed = 0;
  private readonly meters = new Map<ModelLane, WindowMeter>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private stopped = false;

  private lane(model: ModelEntry): ModelLane {
    let l = this.lanes.get(model.id);
    if (!l) {
      const shared = model.maxConcurrency !== null && this.sharedUsed < SHARED_MODELS ? { cells: this.sharedCells, base: CELLS * this.sharedUsed++ } : null;
      const ctl = model.adaptive && model.maxConcurrency !== null ? new AdaptiveLimit({ max: model.maxConcurrency }) : null;
      l = new ModelLane(ctl ? ctl.limit : model.maxConcurrency, model.queueSize, shared, ctl, ctl ? null : model.maxConcurrency);
      this.lanes.set(model.id, l);
      l.place = this.place;
      if (this.peakShare !== 1) l.setShare(this.peakShare);
      if (ctl) {
        this.meters.set(l, new WindowMeter(l, ctl, performance.now()));
        if (!this.stopped && !this.timer) {
          let last = performance.now();
          this.timer = setInterval(() => {
            const now = performance.now();
            const late = now - last - TICK_MS;
            last = now;
            this.tickAdaptive(now, late);
          }, TICK_MS);
          (this.timer as { unref?: () => void }).unref?.();
        }
      }
    }
    return l;
  }

  /** Where a limited model's cells start in `sharedCells`, or -1 (its batch lines then ask this thread for every slot). */
  sharedBase(model: ModelEntry): number {
    return model.maxConcurrency === null ? -1 : this.lane(model).sharedBase;
  }

  /** For an interactive request: a slot now if one is free and nobody waits for it, else null (then acquireInteractive). */
  tryInteractive(model: ModelEntry): Release | null {
    const lane = this.lane(model);
    return lane.interactive.length === 0 && lane.tryTake() ? this.releaser(lane, false) : null;
  }

  /** For an interactive request: a slot now, a place in the queue, or 529. `signal` is read only if it has to wait. */
  async acquireInteractive(model: ModelEntry, signal?: () => AbortSignal): Promise<Release> {
    const now = this.tryInteractive(model);
    if (now) return now;
    const lane = this.lane(model);
    if (lane.interactive.length >= lane.queueSize) {
      throw new ApiError("overloaded", `Model ${model.id} is overloaded: its queue is full. Retry shortly.`, { headers: { "retry-after": "1" } });
    }
    await this.wait(lane, lane.interactive, signal);
    return this.releaser(lane, false);
  }

  /**
   * For a batch line: waits (without bound) until interactive traffic leaves
   * a slot, and its batch's turn comes (`key`: its place in the batch order;
   * a capped key also waits for the peak cap).
   */
  async acquireBatch(model: ModelEntry, onQueued?: (cancel: () => void) => void, key?: BatchKey): Promise<Release> {
    const lane = this.lane(model);
    const w0 = { key } as Waiter;
    if (lane.interactive.length === 0 && lane.batch.length === 0 && lane.mayGrant(w0) && lane.tryTake()) {
      if (key?.capped) lane.cappedInFlight++;
      return this.releaser(lane, true, key?.capped);
    }
    const w = await this.wait(lane, lane.batch, undefined, key, onQueued);
    return this.releaser(lane, true, w.capped);
  }

  /**
   * Off-peak hours (docs/CONTRACT.md §18): capped batches may hold `share` (0–1) of each
   * limited model's slots; 1 lifts the cap. On a cluster it is a share of
   * the cluster's limit, and each node holds its part of it (setPlace).
   */
  setPeakShare(share: number): void {
    for (const lane of this.lanes.values()) if (lane.share !== share) lane.setShare(share);
    this.peakShare = share;
  }

  /** The share capped batches get now (1: no cap). */
  peakShare = 1;

  /** This node among the live ones, and the turn of the peak cap's odd parts (ModelLane.cap). */
  private place = { index: 0, count: 1, turn: 0 };

  /**
   * On a cluster (nodes/membership.ts, at every heartbeat): this node's
   * place among the live nodes and the turn (a number every node computes
   * alike: the minute). The peak cap is the cluster's, split by them.
   */
  setPlace(index: number, count: number, turn: number): void {
    const p = this.place;
    if (p.index === index && p.count === count && p.turn === turn) return;
    this.place = { index: Math.max(0, index), count: Math.max(1, count), turn };
    for (const lane of this.lanes.values()) lane.setPlace(this.place);
  }

  /** A batch's key changed (it is no longer capped): waiters may be served now. */
  pumpAll(): void {
    for (const lane of this.lanes.values()) lane.pump();
  }

  /**
   * This node's part of a limited model's max_concurrency (docs/CONTRACT.md §14: the
   * limit is the cluster's total, shared among live nodes). Unlimited models
   * stay unlimited. For "auto" it is the part of max_concurrency_limit: the
   * controller's ceiling.
   */
  setLimit(model: ModelEntry, limit: number): void {
    if (model.maxConcurrency === null) return;
    const lane = this.lane(model);
    if (lane.adaptive) {
      lane.adaptive.setMax(limit);
      limit = lane.adaptive.limit;
    }
    if (lane.limit !== limit) lane.setLimit(limit);
  }

  /** The limit in force for a model now (its share on a cluster, or what its controller found), or null. */
  limitOf(model: ModelEntry): number | null {
    return model.maxConcurrency === null ? null : this.lane(model).limit;
  }

  /** What the controller of an "auto" model knows, or null (fixed or unlimited, or not used yet). */
  adaptiveState(modelId: string): AdaptiveState | null {
    const ctl = this.lanes.get(modelId)?.adaptive;
    if (!ctl) return null;
    return { limit: ctl.limit, ceiling: ctl.ceiling, latencyMs: ctl.latencyMs, floorMs: ctl.floorMs, decision: ctl.last, trace: ctl.trace };
  }

  /** Reads every adaptive model's cells (the timer calls it every TICK_MS, saying how late it came; tests may call it with their own clock). */
  tickAdaptive(now = performance.now(), lateMs = 0): void {
    for (const m of this.meters.values()) m.tick(now, lateMs);
  }

  /** Stops the controllers' timer (server stop). */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** A Worker freed slots it had taken itself while requests wait here: hand them on. */
  pump(modelId: string): void {
    this.lanes.get(modelId)?.pump();
  }

  /**
   * A Worker died or was stopped: the `n` slots it took itself come back, and
   * waiters are served even if `n` is 0 (a slot it freed may have come with a
   * "hand this on" request that died with it).
   */
  giveBack(modelId: string, n: number): void {
    const lane = this.lanes.get(modelId);
    if (!lane) return;
    if (n > 0) lane.give(n);
    lane.pump();
  }

  /**
   * Queues a waiter until a slot is granted. It leaves the queue (and the
   * promise rejects) when `signalOf`'s signal aborts, or when the function
   * handed to `onQueued` is called (a batch line's ask withdrawn: no
   * AbortController and listener per ask on that path).
   */
  private wait(lane: ModelLane, queue: Waiter[] | BatchQueue<Waiter>, signalOf?: () => AbortSignal, key?: BatchKey, onQueued?: (cancel: () => void) => void): Promise<Waiter> {
    const signal = signalOf?.();
    // The limit holds this request back (not a peak cap, not its turn): the controller may try more.
    if (lane.limit !== null && lane.inFlight >= lane.limit) lane.pressure++;
    return new Promise<Waiter>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason ?? new Error("aborted"));
      let granted = false;
      const w: Waiter = {
        grant: () => {
          granted = true;
          resolve(w);
        },
        cancelled: false,
        key,
      };
      queue.push(w);
      lane.publish();
      const cancel = (reason?: unknown) => {
        if (w.cancelled || granted) return;
        w.cancelled = true;
        // Leave the queue at once: a client that gave up and kept its
        // place would hold `queued` (GET /status) up and make the bounded
        // queue answer 529 although nobody waits.
        if (queue instanceof BatchQueue) queue.remove(w);
        else {
          const i = queue.indexOf(w);
          if (i !== -1) queue.splice(i, 1);
        }
        lane.publish();
        reject(reason ?? new Error("aborted"));
      };
      signal?.addEventListener("abort", () => cancel(signal.reason), { once: true });
      onQueued?.(cancel);
      // A slot may have come free between the failed take and the push.
      lane.pump();
    });
  }

  private releaser(lane: ModelLane, batch: boolean, capped = false): Release {
    if (!batch) lane.interactiveInFlight++;
    // A Worker that shares the cells counts its own outcomes (slots.ts): its release comes here by message, late.
    const meter = batch && lane.sharedWithWorkers ? null : lane.meter;
    const since = meter ? performance.now() : 0;
    let done = false;
    return (outcome) => {
      if (done) return;
      done = true;
      if (meter) noteRelease(meter.cells, meter.base, since, outcome);
      if (!batch) lane.interactiveInFlight--;
      if (capped) lane.cappedInFlight--;
      lane.give();
      lane.pump();
    };
  }

  /** Whether lines of batch `batchId` wait here for a slot of `modelId`. */
  batchWaiting(modelId: string, batchId: string): boolean {
    return this.lanes.get(modelId)?.batch.hasWaiting(batchId) ?? false;
  }

  /** `batchCap`: the capped batches' slots on this node now; `clusterBatchCap`: in the whole cluster. */
  stats(modelId: string): { inFlight: number; queued: number; batchInFlight: number; batchQueued: number; batchCap: number | null; clusterBatchCap: number | null; cappedQueued: number } {
    const l = this.lanes.get(modelId);
    const inFlight = l?.inFlight ?? 0;
    return {
      inFlight,
      queued: l?.queued ?? 0,
      batchInFlight: Math.max(0, inFlight - (l?.interactiveInFlight ?? 0)),
      batchQueued: l?.batch.length ?? 0,
      batchCap: l?.cap ?? null,
      clusterBatchCap: l?.clusterCap ?? null,
      cappedQueued: l ? l.batch.cappedWaiting() : 0,
    };
  }
}

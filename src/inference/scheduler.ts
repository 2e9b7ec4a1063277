// One scheduler per process decides who may use a model's capacity.
// Interactive requests go first; batch lines ("off-peak") get a slot only
// when no interactive request is waiting, so batches use what interactive
// traffic leaves free. A model without max_concurrency is unlimited and
// needs no slots. A full interactive queue answers 529 at once.
//
// A limited model's slot count lives in memory shared with the batch Workers
// (`sharedCells`), so a Worker can take a free slot with one atomic operation
// instead of a round trip to this thread per line — but only while nobody
// waits here for that model (see batches/worker/slots.ts). Everything that
// waits still waits here, in order, interactive first.
import { ApiError } from "../errors";
import type { ModelEntry } from "./registry";

interface Waiter {
  grant: () => void;
  cancelled: boolean;
}

/** Per limited model, 3 cells in shared memory. */
export const CELLS = 3;
export const IN_FLIGHT = 0;
export const LIMIT = 1;
/** Requests waiting here (interactive and batch): Workers then do not take slots themselves, and one that frees a slot asks this thread to hand it on. */
export const WAITING = 2;
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

class ModelLane {
  private localInFlight = 0;
  /** Slots held by interactive requests (the rest of inFlight are batch lines). */
  interactiveInFlight = 0;
  readonly interactive: Waiter[] = [];
  readonly batch: Waiter[] = [];
  constructor(
    /** The model's max_concurrency; on a cluster, this node's share of it (setLimit). */
    public limit: number | null,
    readonly queueSize: number,
    /** The shared cells of this model (limited models only), and where they start. */
    private readonly shared: { cells: Int32Array; base: number } | null,
  ) {
    if (shared && limit !== null) Atomics.store(shared.cells, shared.base + LIMIT, limit);
  }

  get sharedBase(): number {
    return this.shared ? this.shared.base : -1;
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

  /** A new limit (a cluster's share changed): takes beyond it wait until enough slots are given back. */
  setLimit(limit: number): void {
    this.limit = limit;
    if (this.shared) Atomics.store(this.shared.cells, this.shared.base + LIMIT, limit);
    this.pump();
  }

  /** Hands free slots to waiters, interactive first. */
  pump(): void {
    for (;;) {
      let q = this.interactive;
      let w = shiftLive(q);
      if (!w) w = shiftLive((q = this.batch));
      if (!w) break;
      if (!this.tryTake()) {
        q.unshift(w);
        break;
      }
      w.grant();
    }
    this.publish();
  }
}

function shiftLive(q: Waiter[]): Waiter | undefined {
  while (q.length) {
    const w = q.shift()!;
    if (!w.cancelled) return w;
  }
  return undefined;
}

export type Release = () => void;

export class Scheduler {
  private readonly lanes = new Map<string, ModelLane>();
  /** CELLS Int32 per limited model, shared with the batch Workers. */
  readonly sharedCells = new Int32Array(new SharedArrayBuffer(4 * CELLS * SHARED_MODELS));
  private sharedUsed = 0;

  private lane(model: ModelEntry): ModelLane {
    let l = this.lanes.get(model.id);
    if (!l) {
      const shared = model.maxConcurrency !== null && this.sharedUsed < SHARED_MODELS ? { cells: this.sharedCells, base: CELLS * this.sharedUsed++ } : null;
      l = new ModelLane(model.maxConcurrency, model.queueSize, shared);
      this.lanes.set(model.id, l);
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

  /** For a batch line: waits (without bound) until interactive traffic leaves a slot. */
  async acquireBatch(model: ModelEntry, signal?: AbortSignal): Promise<Release> {
    const lane = this.lane(model);
    if (lane.interactive.length === 0 && lane.batch.length === 0 && lane.tryTake()) return this.releaser(lane, true);
    await this.wait(lane, lane.batch, signal && (() => signal));
    return this.releaser(lane, true);
  }

  /**
   * This node's part of a limited model's max_concurrency (SPEC §14: the
   * limit is the cluster's total, shared among live nodes). Unlimited models
   * stay unlimited.
   */
  setLimit(model: ModelEntry, limit: number): void {
    if (model.maxConcurrency === null) return;
    const lane = this.lane(model);
    if (lane.limit !== limit) lane.setLimit(limit);
  }

  /** The limit in force for a model now (its share on a cluster), or null. */
  limitOf(model: ModelEntry): number | null {
    return model.maxConcurrency === null ? null : this.lane(model).limit;
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

  private wait(lane: ModelLane, queue: Waiter[], signalOf?: () => AbortSignal): Promise<void> {
    const signal = signalOf?.();
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason ?? new Error("aborted"));
      let granted = false;
      const w: Waiter = {
        grant: () => {
          granted = true;
          resolve();
        },
        cancelled: false,
      };
      queue.push(w);
      lane.publish();
      signal?.addEventListener(
        "abort",
        () => {
          if (w.cancelled || granted) return;
          w.cancelled = true;
          // Leave the queue at once: a client that gave up used to keep its
          // place, so `queued` (GET /status) stayed up and the bounded queue
          // answered 529 although nobody was waiting.
          const i = queue.indexOf(w);
          if (i !== -1) queue.splice(i, 1);
          lane.publish();
          reject(signal.reason ?? new Error("aborted"));
        },
        { once: true },
      );
      // A slot may have come free between the failed take and the push.
      lane.pump();
    });
  }

  private releaser(lane: ModelLane, batch: boolean): Release {
    if (!batch) lane.interactiveInFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (!batch) lane.interactiveInFlight--;
      lane.give();
      lane.pump();
    };
  }

  stats(modelId: string): { inFlight: number; queued: number; batchInFlight: number; batchQueued: number } {
    const l = this.lanes.get(modelId);
    const inFlight = l?.inFlight ?? 0;
    return { inFlight, queued: l?.queued ?? 0, batchInFlight: Math.max(0, inFlight - (l?.interactiveInFlight ?? 0)), batchQueued: l?.batch.length ?? 0 };
  }
}

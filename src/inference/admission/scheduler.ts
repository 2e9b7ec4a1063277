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
// adds; the reading is a timer here (TICK_MS), a few loads per model, by
// a WindowMeter (./windowMeter.ts). The cells themselves: ./slotCells.ts.
import { ApiError } from "../../errors";
import { WindowMeter } from "./windowMeter";
import { ModelLane, type Waiter } from "./modelLane";
import { CELLS, SHARED_MODELS, noteRelease, type SlotOutcome } from "./slotCells";
import { AdaptiveLimit } from "./adaptive";
import type { ModelEntry } from "../registry";
import { BatchQueue, type BatchKey } from "../../scheduling/order";

/** How often the controllers' cells are read (a few atomic loads per model). */
const TICK_MS = 50;
/** Gives a slot back; `outcome` says what its holder saw (nothing counted when left out). */
export type Release = (outcome?: SlotOutcome) => void;

/** The limits of "auto" models with several replicas (src/inference/replicas/limits.ts ReplicaLimits). */
export interface ReplicaLimitSource {
  /** Each replica's controller reads its window. */
  tick(now: number, lateMs: number): void;
  /** The model's limit as the sum of its replicas', or null when the model's own controller sets it. */
  limitOf(model: ModelEntry): number | null;
}

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
  /** The model each adaptive lane is for (its replicas may set its limit). */
  private readonly modelOf = new Map<ModelLane, ModelEntry>();
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
        this.modelOf.set(l, model);
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
      // Set by its replicas' controllers (tickAdaptive): the sum stands.
      if (this.replicaLimits?.limitOf(model) != null) return;
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

  /**
   * Where the limits of "auto" models with several replicas come from: each
   * replica's own controller (src/inference/replicas/limits.ts); such a
   * model's limit is their sum, and its own controller waits.
   */
  replicaLimits: ReplicaLimitSource | null = null;

  /** Reads every adaptive model's cells (the timer calls it every TICK_MS, saying how late it came; tests may call it with their own clock). */
  tickAdaptive(now = performance.now(), lateMs = 0): void {
    const byReplicas = this.replicaLimits;
    byReplicas?.tick(now, lateMs);
    for (const [lane, m] of this.meters) {
      const model = this.modelOf.get(lane);
      const sum = byReplicas && model ? byReplicas.limitOf(model) : null;
      if (sum === null) m.tick(now, lateMs);
      else if (lane.limit !== sum) lane.setLimit(sum);
    }
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

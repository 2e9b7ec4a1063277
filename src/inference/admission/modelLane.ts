// One limited model's lane in the scheduler (./scheduler.ts): its slots
// (in the shared cells while Workers may take them: ./slotCells.ts), its
// waiters (interactive first, then batch lines in the batch order), the cap
// of off-peak hours, and the hand-out of free slots.
import type { AdaptiveLimit } from "./adaptive";
import { CAPPED, CELLS, IN_FLIGHT, LIMIT, WAITING, tryTakeSlot } from "./slotCells";
import { BatchQueue, type BatchKey } from "../../scheduling/order";
import { partInTurn } from "../../nodes/parts";

export interface Waiter {
  grant: () => void;
  cancelled: boolean;
  /** A batch line's place in the batch order (scheduling/order.ts); none for interactive requests. */
  key?: BatchKey;
  /** Granted as a capped line (counted in cappedInFlight until released). */
  capped?: boolean;
}

export class ModelLane {
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

function shiftLive(q: Waiter[]): Waiter | undefined {
  while (q.length) {
    const w = q.shift()!;
    if (!w.cancelled) return w;
  }
  return undefined;
}

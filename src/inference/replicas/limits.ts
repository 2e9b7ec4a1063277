// Each replica of an upstream with max_concurrency "auto" finds its own limit
// (docs/CONTRACT.md §18, §21): engines behind one model differ (another GPU,
// another engine version, a neighbour on the same card), and one limit for
// the model, split evenly, would overload the slow ones and starve the fast.
// Each replica has the same controller a model has
// (src/inference/admission/adaptive.ts), fed by the same meter
// (src/inference/admission/windowMeter.ts) from the replica's own shared cells
// (./cells.ts: its answers, their time, its 429/503 answers, and whether a
// request or a line found it at its limit). The dispatch and the prefix
// windows keep each replica under its limit (./pick.ts, src/batches/worker/placement.ts);
// the model's limit (its slots in the scheduler) is the sum over its
// replicas taking work.
//
// A model with one replica keeps the model's own controller: its limit is
// the replica's.
import { AdaptiveLimit } from "../admission/adaptive";
import { WindowMeter, type MeteredLane } from "../admission/windowMeter";
import type { ModelEntry } from "../registry";
import { REPLICA_METER, inFlightOf, limitNow, placedOn, replicaBase, setAdaptiveLimit, setWanted, wantedOf, type ReplicaCells } from "./cells";
import type { ReplicaView } from "./pick";
import type { ReplicaSets } from "./set";

/** One replica's controller, and its meter's view of the replica's cells as a lane. */
interface ReplicaLimit {
  ctl: AdaptiveLimit;
  meter: WindowMeter;
}

/** A replica's cells as the meter reads a model's lane. */
function laneOf(cells: ReplicaCells, idx: number): MeteredLane {
  return {
    meter: { cells, base: replicaBase(idx) },
    get pressure() {
      return wantedOf(cells, idx);
    },
    set pressure(n: number) {
      setWanted(cells, idx, n);
    },
    get limit() {
      return limitNow(cells, { idx, limit: 0 });
    },
    get inFlight() {
      return Math.max(inFlightOf(cells, idx), placedOn(cells, idx));
    },
    setLimit: (limit) => setAdaptiveLimit(cells, idx, limit),
  };
}

export class ReplicaLimits {
  private readonly byIdx = new Map<number, ReplicaLimit>();

  constructor(private readonly sets: ReplicaSets) {}

  /** Every replica controller reads its window (the scheduler's timer, before it sums). */
  tick(now: number, lateMs: number): void {
    for (const r of this.byIdx.values()) r.meter.tick(now, lateMs);
  }

  /**
   * The model's limit now: the sum of its replicas' limits, each found by
   * its own controller (at most the model's per-replica ceiling); null when
   * the model's own controller sets it (not "auto", or fewer than two
   * replicas taking work).
   */
  limitOf(model: ModelEntry): number | null {
    if (!model.adaptive || !model.upstream || model.maxConcurrency === null) return null;
    const views = this.sets.views(model.upstream);
    if (views.length < 2) return null;
    const ceiling = Math.max(1, Math.floor(model.maxConcurrency / views.length));
    let sum = 0;
    for (const v of views) sum += this.of(v, ceiling).ctl.limit;
    return sum;
  }

  private of(v: ReplicaView, ceiling: number): ReplicaLimit {
    const cells = this.sets.cells;
    let r = this.byIdx.get(v.idx);
    if (!r) {
      const ctl = new AdaptiveLimit({ max: ceiling });
      setAdaptiveLimit(cells, v.idx, ctl.limit);
      r = { ctl, meter: new WindowMeter(laneOf(cells, v.idx), ctl, performance.now(), REPLICA_METER) };
      this.byIdx.set(v.idx, r);
    } else if (r.ctl.ceiling !== ceiling) {
      r.ctl.setMax(ceiling);
      setAdaptiveLimit(cells, v.idx, r.ctl.limit);
    }
    return r;
  }
}

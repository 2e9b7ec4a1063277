// Where a model's prefix groups (./prefixGroups.ts) go: its replicas taking
// work now, a prefix's home among them, and whether one has room.
import { inFlightOf } from "../../inference/replicas/cells";
import { homeOf } from "../../inference/replicas/pick";
import type { PricedModel } from "../types";
import type { Placement } from "./prefixGroups";
import { replicaCells, replicasOf } from "./replicas";

/**
 * A replica has room while its requests in flight (every thread's) are
 * below its own max_concurrency, or below its share of `bound` (what the
 * shard may have in flight for the model: its limit on this node and a
 * quarter more).
 */
export function placementOf(model: PricedModel, bound: number): Placement {
  const cells = replicaCells()!;
  const views = () => replicasOf(model.upstream);
  return {
    replicas: () => views().map((v) => v.idx),
    home: (key) => homeOf(views(), cells, key)?.idx ?? -1,
    hasRoom: (idx) => {
      const all = views();
      const v = all.find((x) => x.idx === idx);
      if (!v) return false;
      const share = v.limit > 0 ? v.limit : Math.max(1, Math.ceil(bound / all.length));
      return inFlightOf(cells, idx) < share;
    },
  };
}

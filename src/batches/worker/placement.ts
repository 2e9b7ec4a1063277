// Where a model's prefix groups (./prefixGroups.ts) go: its replicas taking
// work now, a prefix's home among them, and whether one has room.
import { inFlightOf, limitNow, lineEnded, linePlaced, placedOn, wantedFull } from "../../inference/replicas/cells";
import { prefixClosed, prefixKeysOn, prefixOpened, prefixStateOn, prefixWarmed, prefixesOn } from "../../inference/replicas/openPrefixes";
import { homeOf } from "../../inference/replicas/pick";
import type { PricedModel } from "../types";
import type { BatchRequest } from "./resultLines";
import type { Placement } from "./prefixGroups";
import { replicaCells, replicasOf } from "./replicas";

/**
 * A replica has room while both its requests in flight (every thread's,
 * interactive ones included) and the batch lines placed on it (every
 * window's, also those still waiting for a slot) are below its own
 * max_concurrency, or below its share of `bound` (what the shard may have
 * in flight for the model: its limit on this node and a quarter more).
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
      const own = limitNow(cells, v);
      const share = own > 0 ? own : Math.max(1, Math.ceil(bound / all.length));
      if (inFlightOf(cells, idx) < share && placedOn(cells, idx) < share) return true;
      if (own > 0) wantedFull(cells, idx);
      return false;
    },
    groupsOn: (idx) => prefixesOn(cells, idx),
    opened: (idx, key) => prefixOpened(cells, idx, key),
    closed: (idx, key) => prefixClosed(cells, idx, key),
    warmed: (idx, key) => prefixWarmed(cells, idx, key),
    stateOn: (idx, key) => prefixStateOn(cells, idx, key),
    keysOn: (idx) => prefixKeysOn(cells, idx),
    placed: (idx) => linePlaced(cells, idx),
    ended: (idx) => lineEnded(cells, idx),
  };
}

/** A line waiting in a shard's prefix window. */
export interface Grouped {
  req: BatchRequest;
  model: PricedModel;
  chars: number;
}

/** How long a prefix window that may send nothing waits before it looks again, when no line of its own is in flight to wake it. */
export const WAIT_POLL_MS = 20;

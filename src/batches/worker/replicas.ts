// A batch Worker's view of the upstreams' replica sets (docs/CONTRACT.md §21):
// the shared cells (in flight, breakers) and the latest snapshot of which
// replicas take work, replaced by the main thread's "replicas" message on
// every change (a drained replica gets no new line within a message's time).
import type { EngineTimes, ReplicaCells } from "../../inference/replicas/cells";
import type { ReplicaView } from "../../inference/replicas/pick";

let cells: ReplicaCells | null = null;
let times: EngineTimes | null = null;
let sets: Record<string, ReplicaView[]> = {};

export function setReplicas(shared: ReplicaCells, snapshot: Record<string, ReplicaView[]>, engineTimes: EngineTimes): void {
  cells = shared;
  sets = snapshot;
  times = engineTimes;
}

/** When each replica's engine load was read (inference/replicas/cells.ts). */
export const replicaTimes = (): EngineTimes | null => times;

export function updateReplicas(snapshot: Record<string, ReplicaView[]>): void {
  sets = snapshot;
}

/** The shared cells (null before the Worker's init: unit tests of the line steps run without). */
export const replicaCells = (): ReplicaCells | null => cells;

/** The replicas of `upstream` taking work now. */
export const replicasOf = (upstream: string | null): readonly ReplicaView[] => (upstream ? (sets[upstream] ?? []) : []);

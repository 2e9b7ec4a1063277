// The batch order reaching Workers that are mid-shard (docs/CONTRACT.md §18). Claims
// follow the order (db/claims.ts) whenever a Worker comes free, but a shard
// runs for minutes, so while every Worker here is busy, about once a second,
// this asks whether a batch ahead in the order (an earlier deadline, or a
// project holding two Workers fewer) has shards waiting, and if so tells
// the Worker of a shard behind it that has run YIELD_AFTER_MS to yield: it
// pauses as at a shutdown (its in-flight lines finish, the part files keep
// all that is done), reports "paused", goes back to pending, and the claim
// that follows gives the Worker to the batch ahead. scheduling/order.ts
// (yieldsFor) says which shards, and why the yields come to an end.
//
// On a cluster every node reads the same rows: each yields only for its
// part of the waiting shards (../../nodes/parts.ts, the odd ones to the
// nodes in turn, TURN_MS each), or two nodes would each yield a Worker for
// one waiting shard, and one of them would only take its own shard back.
//
// Chosen over a Worker kept free for urgent work (on 2 cores that is half
// the batch throughput, all the time, for work that comes now and then) and
// over a second shard on a busy Worker (its memory, and the one-shard-per-
// Worker bookkeeping of slots and checkpoints). Validation, short and with
// neither, does ride along on a busy Worker instead (../pool.ts). A yield costs one drain of
// the Worker's in-flight lines and one re-read of the shard's part files
// when it runs again; the Workers do nothing new for it (a pause is what a
// shutdown and a lost lease already do).
import type { AppContext } from "../../context";
import { partInTurn } from "../../nodes/parts";
import { bucketOf, yieldsFor } from "../../scheduling/order";
import type { WorkerPool } from "../pool";
import type { TickQueries } from "../tickQueries";
import type { LiveShards } from "./live";
import type { Stops } from "./stops";

/** A shard yields only after it has run this long here: at most one yield per Worker per this time. */
export const YIELD_AFTER_MS = 2000;
/** How often the order is read while every Worker is busy (one query). */
const CHECK_MS = 1000;
/** How long one node has a cluster's odd waiting shards to yield for: long enough for a yield to show in the rows. */
const TURN_MS = 3000;

export class Yields {
  private lastCheck = 0;

  constructor(
    private readonly ctx: AppContext,
    private readonly q: TickQueries,
    private readonly live: LiveShards,
    private readonly stops: Stops,
  ) {}

  /** At each tick, after dispatch. */
  async check(now: number, pool: WorkerPool): Promise<void> {
    // A free Worker: the next claim serves the order by itself.
    if (pool.idle > 0 || this.live.size === 0 || now - this.lastCheck < CHECK_MS) return;
    // Yields asked for are still under way: the rows do not show them yet.
    for (const l of this.live.values()) if (l.yielding) return;
    this.lastCheck = now;
    const rows = await this.q.orderCounts.execute();
    const hour = this.ctx.config.batches.hourSeconds;
    const { index, count } = this.ctx.members?.place() ?? { index: 0, count: 1 };
    const turn = Math.floor(now / TURN_MS);
    const batches = rows.map((r) => ({ id: r.id, project: r.project, bucket: bucketOf(r.expiresAt, hour), running: r.running, pending: count > 1 ? partInTurn(r.pending, index, count, turn) : r.pending, seq: r.seq }));
    // Shards of a stopped batch are draining their lines as errors: not worth a yield.
    const live = [...this.live.values()].filter((l) => !this.stops.stopping(l.batchId)).map((l) => ({ batchId: l.batchId, idx: l.idx, ranMs: now - l.startedAt }));
    for (const y of yieldsFor(batches, live, YIELD_AFTER_MS)) {
      const l = this.live.get(y.batchId, y.idx);
      if (!l || !pool.postToShard(y.batchId, y.idx, { type: "yield", batchId: y.batchId, idx: y.idx })) continue;
      l.yielding = true;
      this.ctx.log.info("batch shard yields its Worker to a batch ahead in the order", { batch_id: y.batchId, shard: y.idx, ran_ms: now - l.startedAt });
    }
  }
}

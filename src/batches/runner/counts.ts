// request_counts, usage, and the progress view (estimated_completion_at,
// status_details) of the batches running here, written every COUNTS_MS by
// the tick, never per line: a batch's counts are the sum of its shards'
// rows, and a running shard's row takes the totals its Worker last reported.
import type { BatchProgress } from "../statusDetails";
import type { TickQueries } from "../tickQueries";
import type { LiveShards } from "./live";

export class CountsWriter {
  /** Batches whose counters changed since the last write (a shard finished). */
  private readonly dirty = new Set<string>();

  constructor(
    private readonly q: TickQueries,
    private readonly live: LiveShards,
    private readonly progress: BatchProgress,
  ) {}

  /** A shard of the batch ended here: its counts are written at the next write, even with nothing left running. */
  changed(batchId: string): void {
    this.dirty.add(batchId);
  }

  /**
   * request_counts and usage = the sum of every shard's row. A running shard's
   * row first takes its live totals, field by field never lower than what the
   * row held: after a restart a shard reports its recovered totals only once
   * it has re-read its part files, and the counts must not go back meanwhile.
   * A done shard's row holds its exact totals (written by "done").
   */
  async write(): Promise<void> {
    const ids = [...new Set([...this.live.batchIds(), ...this.dirty])];
    this.dirty.clear();
    if (ids.length === 0) return;
    // Not one transaction: each statement stands on its own (a shard's row
    // only grows; a batch's counts are a sum read at one moment), and on
    // Postgres the prepared statements run on the pool, not a transaction's
    // connection. On SQLite the whole set still runs in one turn.
    try {
      for (const l of [...this.live.values()]) await this.q.shardCounts.execute({ ...l.totals, batchId: l.batchId, idx: l.idx });
      const running = this.live.batchIds();
      for (const id of ids) {
        const [sums] = await this.q.shardSums.execute({ id });
        await this.q.batchCounts.execute({ ...sums!, id });
        if (running.has(id)) await this.progress.counted(id, sums!.completed + sums!.failed);
      }
    } catch (e) {
      // Written again at the next turn (the database may be away for a while).
      for (const id of ids) this.dirty.add(id);
      throw e;
    }
  }
}

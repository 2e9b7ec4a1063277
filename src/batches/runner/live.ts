// The shards this process runs now, with their latest totals (the Workers'
// "progress" messages). The batch runner's one piece of memory about running
// work: it is rebuilt from nothing at a restart (the rows and part files are
// the truth), and every part of the runner reads it through this class.
import { zeroTotals, type ShardTotals } from "../types";

export interface LiveShard {
  batchId: string;
  idx: number;
  totals: ShardTotals;
  /** When its Worker got it (ms): a shard yields its Worker only after it has run a while (./yields.ts). */
  startedAt: number;
  /** Asked to yield its Worker (it pauses, then goes back to pending). */
  yielding: boolean;
}

const keyOf = (batchId: string, idx: number) => `${batchId}/${idx}`;

export class LiveShards {
  private readonly m = new Map<string, LiveShard>();

  get size(): number {
    return this.m.size;
  }

  add(batchId: string, idx: number, now = Date.now()): void {
    this.m.set(keyOf(batchId, idx), { batchId, idx, totals: zeroTotals(), startedAt: now, yielding: false });
  }

  get(batchId: string, idx: number): LiveShard | undefined {
    return this.m.get(keyOf(batchId, idx));
  }

  has(batchId: string, idx: number): boolean {
    return this.m.has(keyOf(batchId, idx));
  }

  delete(batchId: string, idx: number): void {
    this.m.delete(keyOf(batchId, idx));
  }

  values(): IterableIterator<LiveShard> {
    return this.m.values();
  }

  /** The batches with a shard running here. */
  batchIds(): Set<string> {
    const ids = new Set<string>();
    for (const l of this.m.values()) ids.add(l.batchId);
    return ids;
  }
}

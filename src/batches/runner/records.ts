// Database writes the batch runner starts from a Worker's message or a timer,
// not from a tick: a shard's end, a shard given back, a validation's outcome.
// A tick decides again from the rows, so most such writes may fail and be
// logged (later()); but a shard's progress must never be dropped (record()):
// a shard whose end was not recorded would stay `running` for good, and one
// run again would send its lines upstream twice.
import type { AppContext } from "../../context";
import { databaseUnavailable, unavailableLogger } from "../../db/unavailable";
import { shardDone, shardReleased } from "../shardStatus";
import type { ShardTotals } from "../types";

/** A progress record is written again after 0.1 s, 0.2 s … at most 2 s while the database is unavailable (it lands soon after it returns), at most 30 s after any other error; jittered. */
const recordDelayMs = (attempt: number, down: boolean) => Math.min(100 * 2 ** (attempt - 1), down ? 2000 : 30_000) * (0.5 + Math.random() / 2);

export class ProgressRecords {
  /** Progress records still being written: stop() waits for them (settle()). */
  private readonly recording = new Set<Promise<void>>();
  /** Set by settle() when it stops waiting for them: what is left lapses with the leases. */
  private abandoned = false;
  /** Says "the database is unavailable" once every few seconds, not at every write. */
  readonly noteUnavailable: ReturnType<typeof unavailableLogger>;

  constructor(
    private readonly ctx: AppContext,
    /** This node's id: the lease owner its writes are conditioned on. */
    private readonly owner: string,
  ) {
    this.noteUnavailable = unavailableLogger((msg, fields) => ctx.log.warn(msg, fields));
  }

  /** A database write started from a Worker message or a timer: its failure is logged (the next tick decides again from the rows). */
  later(p: Promise<unknown>): void {
    p.catch((e) => {
      const down = databaseUnavailable(e);
      if (down) this.noteUnavailable("batch runner writes", down);
      else this.ctx.log.error("batch runner: database write failed", { error: String(e?.stack ?? e) });
    });
  }

  /**
   * A write that records a shard's progress (its end, its release), tried
   * until it lands: never dropped, never a reason to run the shard again.
   * Until it lands the shard's row says `running` under this node's lease,
   * which the ticks renew, so nobody else takes the shard, and its answers
   * wait in its part files; dropped, a shard that ended during a Postgres
   * restart would stay `running` for good (a batch stuck at 3,938 of
   * 4,000). Each write must be idempotent; `still()` false ends the tries.
   */
  record(what: string, fields: Record<string, unknown>, write: () => Promise<unknown>, still: () => boolean = () => true, then?: () => void): void {
    const p = (async () => {
      for (let attempt = 1; !this.abandoned && still(); attempt++) {
        try {
          await write();
          if (attempt > 1) this.ctx.log.info("batch progress recorded after retries", { what, attempts: attempt, ...fields });
          then?.();
          return;
        } catch (e) {
          const down = databaseUnavailable(e);
          if (down) this.noteUnavailable("batch progress records", down, { what, ...fields });
          else this.ctx.log.error("batch runner: database write failed, will retry", { what, attempt, ...fields, error: String((e as Error)?.stack ?? e) });
          await Bun.sleep(recordDelayMs(attempt, down !== null));
        }
      }
    })();
    this.recording.add(p);
    void p.finally(() => this.recording.delete(p));
  }

  /** A shard this node holds goes back to pending (record()); `still()` false (it runs here again) ends the tries. */
  recordRelease(batchId: string, idx: number, still: () => boolean, then?: () => void): void {
    this.record("shard released", { batch_id: batchId, shard: idx }, () => releaseShard(this.ctx, this.owner, batchId, idx), still, then);
  }

  /** A shard's exact totals once its Worker has written and flushed all of it (record()). */
  recordDone(batchId: string, idx: number, totals: ShardTotals): void {
    this.record("shard done", { batch_id: batchId, shard: idx }, () => recordShardDone(this.ctx, batchId, idx, totals, this.owner));
  }

  /**
   * At shutdown: records still being tried land first, until `until` (ms);
   * after it they are given up (the leases lapse, and whoever runs those
   * shards next finds their answers in the part files).
   */
  async settle(until: number): Promise<void> {
    while (this.recording.size > 0 && Date.now() < until) await Bun.sleep(20);
    this.abandoned = true;
  }
}

/** A shard this node holds goes back to pending (only while this node holds its lease). */
export async function releaseShard(ctx: AppContext, owner: string, batchId: string, idx: number): Promise<void> {
  await shardReleased(ctx.db, batchId, idx, owner);
}

/**
 * A shard's exact totals once its Worker has written and flushed all of it.
 * Only while this node still holds the shard's lease: a node that lost it
 * (stalled past batches.lease_ms, so another took the shard over) must not
 * end a shard that another node now runs.
 */
async function recordShardDone(ctx: AppContext, batchId: string, idx: number, totals: ShardTotals, owner: string): Promise<void> {
  // (Tried again after a lost connection, the earlier try may have committed: that is done too.)
  if (!(await shardDone(ctx.db, batchId, idx, totals, owner))) ctx.log.warn("batch shard finished after its lease was lost: another node runs it", { batch_id: batchId, shard: idx });
}

// Leases (docs/CONTRACT.md §14): a shard or a batch-level phase (validating, finalizing)
// belongs to the node whose id is in its row until the lease's expiry, which
// that node's ticks push forward. A lease whose owner stopped renewing it is
// free: its shards go back to pending for any node to claim, its batch phase
// to whoever claims it next. What the owner had done is in its part files,
// so taking over loses nothing.
//
// Also here: the database's absences as the ticks see them, since a lease
// that lapsed while the database was away did not lapse by its owner's
// fault (ownerIsDead).
import { and, eq, isNull } from "drizzle-orm";
import type { AppContext } from "../../context";
import type { DatabaseUnavailable } from "../../db/unavailable";
import { processGone } from "../../nodes/identity";
import type { BatchRow } from "../service";
import type { TickQueries } from "../tickQueries";
import { shardLapsed, shardsOfOwnerReleased } from "../shardStatus";

export class Leases {
  /** When ticks began to find the database unavailable (0: they do not). */
  private downSince = 0;
  /** When the database came back after ticks found it unavailable (Infinity: not yet; it is away). */
  private backAt = -Infinity;

  constructor(
    private readonly ctx: AppContext,
    /** This node's id (src/nodes/identity.ts). */
    readonly owner: string,
    private readonly q: TickQueries,
  ) {}

  /**
   * The database does not answer (a restart, a failover, a cut: docs/CONTRACT.md §17):
   * ticks fail until it does, Workers go on with the shards they hold and
   * their answers wait in their part files, and what they report is
   * recorded once it is back (ProgressRecords). Said once, not at every tick.
   */
  databaseDown(e: DatabaseUnavailable, liveShards: number): void {
    // Leases seen lapsed are not taken over until one lease period after it is back (ownerIsDead).
    this.backAt = Infinity;
    if (this.downSince) return;
    this.downSince = Date.now();
    this.ctx.log.warn("database unavailable: batch work waits for it", { error: e.message, live_shards: liveShards });
  }

  /** A tick went through: if the database was away, it is back. */
  databaseBack(): void {
    if (!this.downSince) return;
    this.ctx.log.info("database available again", { down_ms: Date.now() - this.downSince });
    this.downSince = 0;
    this.backAt = Date.now();
  }

  /** Pushes every lease this node holds (shards and batch phases) one lease period ahead. */
  async renew(now: number): Promise<void> {
    const until = now + this.ctx.config.batches.leaseMs;
    await this.q.renewShardLeases.execute({ until });
    await this.q.renewBatchLeases.execute({ until });
  }

  /** A lease whose owner stopped renewing it (expired), or whose process on this host is gone, is free. */
  ownerIsDead(owner: string | null, leaseExpiresAt: number | null, now: number): boolean {
    if (!owner) return true;
    if (owner === this.owner) return false;
    // Leases lapse by time, but not by time the database was away: after an
    // outage this node saw, a lease that lapsed meanwhile is its owner's for
    // one more lease period, in which a live owner renews it (at its first tick back).
    if ((leaseExpiresAt ?? 0) < now && now - this.backAt >= this.ctx.config.batches.leaseMs) return true;
    return processGone(owner, this.owner);
  }

  /** Running shards whose owner is dead go back to pending (for any node to claim). */
  async releaseDead(now: number): Promise<void> {
    const held = await this.q.runningShards.execute();
    for (const s of held) {
      if (!this.ownerIsDead(s.owner, s.exp, now)) continue;
      await shardLapsed(this.ctx.db, s.batchId, s.idx, s.owner);
    }
  }

  /** Takes the batch-level lease (validating, finalizing) if free or dead. */
  async claimBatch(b: BatchRow, now: number): Promise<boolean> {
    if (b.leaseOwner === this.owner) return true;
    if (!this.ownerIsDead(b.leaseOwner, b.leaseExpiresAt, now)) return false;
    const { batches } = this.ctx.db.t;
    const res = await this.ctx.db
      .update(batches)
      .set({ leaseOwner: this.owner, leaseExpiresAt: now + this.ctx.config.batches.leaseMs })
      .where(and(eq(batches.id, b.id), b.leaseOwner ? eq(batches.leaseOwner, b.leaseOwner) : isNull(batches.leaseOwner)))
      .returning({ id: batches.id });
    return res.length === 1;
  }

  /** At shutdown: every lease this node holds is given up (its live shards are released first, by the caller). */
  async releaseAll(): Promise<void> {
    const { batches } = this.ctx.db.t;
    await this.ctx.db.update(batches).set({ leaseOwner: null, leaseExpiresAt: null }).where(eq(batches.leaseOwner, this.owner));
    await shardsOfOwnerReleased(this.ctx.db, this.owner);
  }
}

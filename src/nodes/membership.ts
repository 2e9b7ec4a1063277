// The nodes serving one database (docs/CONTRACT.md §14): each process heartbeats its row
// in `nodes` and reads the live ones, every HEARTBEAT_MS. A node is live
// while its last heartbeat is within batches.lease_ms (the same bound after
// which its shard leases are taken over).
//
// What the cluster shares is split among live nodes from this list, never
// asked of the database per request: a limited model's max_concurrency is
// the cluster's total, and each node takes its share (shareOf) at every
// heartbeat. With SQLite the only node is this one and every share is whole.
import { and, eq, gt, isNull, lt } from "drizzle-orm";
import type { AppContext } from "../context";
import type { NodeRow } from "../db/schema";
import { nowSeconds } from "../ids";
import { processGone } from "./identity";
import { databaseUnavailable, unavailableLogger } from "../db/unavailable";
import { splitByWeight } from "./parts";

const HEARTBEAT_MS = 1000;
/** Rows of nodes gone this long are deleted (a stopped node is kept a while for /status). */
const FORGET_AFTER_MS = 3600_000;

export class Membership {
  private timer: ReturnType<typeof setInterval> | null = null;
  private beating: Promise<void> | null = null;
  private readonly startedAt = nowSeconds();
  /** Live nodes at the last heartbeat, sorted by id; this node is always in it. */
  private live: string[];
  private afterBeats: (() => void)[] = [];
  private readonly noteUnavailable = unavailableLogger((msg, fields) => this.ctx.log.warn(msg, fields));

  constructor(
    private readonly ctx: AppContext,
    /** This node's id: the batch runner's lease owner. */
    readonly id: string,
    /** Shards this node runs now (reported in its row). */
    private readonly shards: () => number,
  ) {
    this.live = [id];
  }

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
    this.timer.unref?.();
  }

  /** Called after every heartbeat (shares are taken then). */
  afterBeat(f: () => void): void {
    this.afterBeats.push(f);
    f();
  }

  /** This node's place among the live nodes (by id), and their number. */
  place(): { index: number; count: number } {
    return { index: this.live.indexOf(this.id), count: this.live.length };
  }

  /**
   * This node's part of a limited model's max_concurrency: an even split
   * over the live nodes, in whole parts that add up to exactly `total`.
   * Even, not by work: every node computes its part from its own reading of
   * the heartbeats, and parts that moved with each shard started or ended
   * added up to more than the total between two readings (measured: 59 in
   * flight for a limit of 48 with parts weighted by running shards). An even
   * split changes only when a node joins or leaves. The cost: a node with
   * no batch work leaves its part to its interactive traffic only.
   */
  concurrencyShareOf(total: number): number {
    return splitByWeight(total, this.live.map(() => 1))[this.live.indexOf(this.id)]!;
  }

  private beat(): Promise<void> {
    this.beating ??= this.heartbeat()
      .catch((e) => {
        // The database away (docs/CONTRACT.md §17): said every few seconds, not every beat; the shares stay as they were.
        const down = databaseUnavailable(e);
        if (down) this.noteUnavailable("node heartbeat", down, { node: this.id });
        else this.ctx.log.error("node heartbeat failed", { node: this.id, error: String(e) });
      })
      .finally(() => (this.beating = null));
    return this.beating;
  }

  private async heartbeat(): Promise<void> {
    const { nodes } = this.ctx.db.t;
    const now = Date.now();
    const row = { id: this.id, startedAt: this.startedAt, lastSeen: now, shards: this.shards(), stoppedAt: null };
    await this.ctx.db.insert(nodes).values(row).onConflictDoUpdate({ target: nodes.id, set: { lastSeen: now, shards: row.shards } });
    const rows = await this.ctx.db
      .select({ id: nodes.id })
      .from(nodes)
      .where(and(gt(nodes.lastSeen, now - this.ctx.config.batches.leaseMs), isNull(nodes.stoppedAt)));
    // An earlier process on this host that died without a clean stop is not live, whatever its row says.
    this.live = [...new Set([...rows.map((r) => r.id).filter((id) => !processGone(id, this.id)), this.id])].sort();
    for (const f of this.afterBeats) f();
    if (Math.random() < 0.01) await this.ctx.db.delete(nodes).where(lt(nodes.lastSeen, now - FORGET_AFTER_MS));
  }

  /** Nodes seen within the lease (live), and stopped ones of the last minutes, for GET /status. */
  async report(): Promise<{ id: string; started_at: number; last_seen: number; shards: number; live: boolean }[]> {
    const { nodes } = this.ctx.db.t;
    const now = Date.now();
    const rows: NodeRow[] = await this.ctx.db.select().from(nodes).where(gt(nodes.lastSeen, now - 10 * 60_000)).orderBy(nodes.id);
    return rows.map((r) => ({
      id: r.id,
      started_at: r.startedAt,
      last_seen: Math.floor(r.lastSeen / 1000),
      shards: r.shards,
      live: r.stoppedAt === null && r.lastSeen > now - this.ctx.config.batches.leaseMs,
    }));
  }

  /** A clean stop: the row says so at once, and the others' shares grow at their next heartbeat. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.beating;
    const { nodes } = this.ctx.db.t;
    await this.ctx.db.update(nodes).set({ stoppedAt: nowSeconds(), shards: 0, lastSeen: Date.now() }).where(eq(nodes.id, this.id));
  }
}

// Per-key rate limits for a cluster (SPEC §14: a key's rpm/tpm hold
// cluster-wide): every SYNC_MS each node publishes the counts of its keys
// that changed (one upsert per key) and reads the other nodes' counts of
// the current minute (one query), and hands them to its RateLimiter, which
// adds them and splits what is left among the live nodes until the next
// sync. Nothing is asked of the database per request. Runs on Postgres
// only: on SQLite there is one node.
import { and, eq, lt, ne, sql } from "drizzle-orm";
import type { AppContext } from "../context";
import { WINDOW_MS } from "../inference/rateLimit";
import type { Membership } from "./membership";

const SYNC_MS = 250;

export class KeyUsageSync {
  private timer: ReturnType<typeof setInterval> | null = null;
  private syncing = false;
  private lastCleanup = 0;

  constructor(
    private readonly ctx: AppContext,
    private readonly members: Membership,
  ) {}

  start(): void {
    this.ctx.rateLimiter.enableCluster();
    this.timer = setInterval(() => void this.sync(), SYNC_MS);
    this.timer.unref?.();
  }

  private async sync(): Promise<void> {
    if (this.syncing) return;
    this.syncing = true;
    try {
      const db = this.ctx.db;
      const u = db.t.keyUsage;
      const now = Date.now();
      const windowStart = now - (now % WINDOW_MS);
      // Ours first (the others' next reads see them), then theirs; the
      // allowances that reading changes go out at once, not a sync later:
      // until they do, another node could hand out the same budget.
      await this.publish(now);
      const rows = await db
        .select({
          keyId: u.keyId,
          requests: db.sql.sumNumber(sql`${u.requests} + ${u.reservedRequests}`),
          tokens: db.sql.sumNumber(sql`${u.tokens} + ${u.reservedTokens}`),
          nodes: db.sql.count(),
        })
        .from(u)
        .where(and(eq(u.windowStart, windowStart), ne(u.nodeId, this.members.id)))
        .groupBy(u.keyId);
      const { index, count } = this.members.place();
      this.ctx.rateLimiter.applyCluster({ windowStart, others: new Map(rows.map((r) => [r.keyId, { requests: r.requests, tokens: r.tokens, nodes: r.nodes }])), index, nodes: count });
      await this.publish(now);
      if (now - this.lastCleanup > WINDOW_MS) {
        this.lastCleanup = now;
        await db.delete(u).where(lt(u.windowStart, sql`${windowStart - 2 * WINDOW_MS}`));
      }
    } catch (e) {
      this.ctx.log.error("key usage sync failed", { error: String(e) });
    } finally {
      this.syncing = false;
    }
  }

  /** Upserts this node's counts and unused allowances that changed. */
  private async publish(now: number): Promise<void> {
    const db = this.ctx.db;
    const u = db.t.keyUsage;
    for (const c of this.ctx.rateLimiter.takeChanged(now))
      await db
        .insert(u)
        .values({ ...c, nodeId: this.members.id })
        .onConflictDoUpdate({
          target: [u.windowStart, u.keyId, u.nodeId],
          set: { requests: c.requests, tokens: c.tokens, reservedRequests: c.reservedRequests, reservedTokens: c.reservedTokens },
        });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}

// Per-key rate limits for a cluster (docs/CONTRACT.md §14, §17: a key's rpm/tpm hold
// cluster-wide within 10%). The budget of a key's window lives in one row
// of key_usage (node_id POOL): `requests` and `tokens` are what the nodes
// have taken of the window, and `reserved_requests`/`reserved_tokens` what
// the last statement on the row gave its node (so that one statement's
// RETURNING tells the taker both what it got and what is left). A node
// takes blocks of it when a request finds none in hand
// (src/inference/admission/clusterBudget.ts), never per request; every SYNC_MS it gives
// back what it holds unused (or beyond its pace) and adds the tokens it
// owes (completion tokens counted after the answer). Runs on Postgres
// only: on SQLite there is one node, and its counts in memory are the
// whole truth.
//
// The statement (INSERT … ON CONFLICT DO UPDATE … RETURNING) gives no more
// than the window has left, and concurrent ones on the same row queue on
// its lock: ON CONFLICT DO UPDATE computes the new row from the row's
// latest version, whatever the statement's snapshot. So what all nodes
// take of a window never passes the limit, one round trip a take.
import { lt, sql } from "drizzle-orm";
import type { AppContext } from "../context";
import type { Budget, BudgetStore, Take, Taken } from "../inference/admission/budgetStore";
import type { ClusterBudget } from "../inference/admission/clusterBudget";
import type { Membership } from "./membership";

const SYNC_MS = 250;
/** The node_id of a key's row for a window: the cluster's, not one node's. */
export const POOL = "*";

export class KeyUsageSync implements BudgetStore {
  private timer: ReturnType<typeof setInterval> | null = null;
  private syncing = false;
  private lastCleanup = 0;

  constructor(
    private readonly ctx: AppContext,
    private readonly members: Membership,
    /** This node's limiter (the server's rateLimiter): it takes its budget through this store. */
    private readonly limiter: ClusterBudget,
  ) {}

  start(): void {
    const limiter = this.limiter;
    limiter.onStoreError = (e) => this.ctx.log.error("rate limit budget not taken from the database: admitting out of this node's share meanwhile", { error: String(e) });
    limiter.connect(this);
    this.timer = setInterval(() => void this.sync(), SYNC_MS);
    this.timer.unref?.();
  }

  nodes(): number {
    return this.members.place().count;
  }

  /**
   * One statement on the key's row for the window: applies `delta`, then
   * takes per dimension `want` (at most what is left) — or nothing at all
   * if some limited dimension has less than its `need` left (a request's
   * tokens are no use without the request, nor the request without its
   * tokens). A dimension without a limit takes nothing.
   */
  async take(t: Take): Promise<Taken> {
    const db = this.ctx.db;
    const u = db.t.keyUsage;
    const dims = (["requests", "tokens"] as const).filter((k) => (k === "requests" ? t.limits.rpm : t.limits.tpm) !== null);
    const lim = { requests: t.limits.rpm ?? 0, tokens: t.limits.tpm ?? 0 };
    const col = { requests: u.requests, tokens: u.tokens };
    // The row's figures once the delta is applied, and what it gives: all from the row as it stands when locked.
    const base = (k: keyof Budget) => sql`greatest(0, ${col[k]} + ${t.delta[k]}::bigint)`;
    const enough = dims.length === 0 ? sql`true` : sql.join(dims.map((k) => sql`${lim[k]}::bigint - ${base(k)} >= ${t.need[k]}::bigint`), sql` and `);
    const grant = (k: keyof Budget) =>
      dims.includes(k) ? sql`(case when ${enough} then least(${t.want[k]}::bigint, greatest(0, ${lim[k]}::bigint - ${base(k)})) else 0 end)` : sql`0`;
    // No row yet: the window is whole.
    const firstEnough = dims.every((k) => lim[k] - Math.max(0, t.delta[k]) >= t.need[k]);
    const first = (k: keyof Budget) => (dims.includes(k) && firstEnough ? Math.min(t.want[k], Math.max(0, lim[k] - Math.max(0, t.delta[k]))) : 0);
    const [row] = await db
      .insert(u)
      .values({
        keyId: t.keyId,
        nodeId: POOL,
        windowStart: t.windowStart,
        requests: Math.max(0, t.delta.requests) + first("requests"),
        tokens: Math.max(0, t.delta.tokens) + first("tokens"),
        reservedRequests: first("requests"),
        reservedTokens: first("tokens"),
      })
      .onConflictDoUpdate({
        target: [u.windowStart, u.keyId, u.nodeId],
        set: {
          requests: sql`${base("requests")} + ${grant("requests")}`,
          tokens: sql`${base("tokens")} + ${grant("tokens")}`,
          reservedRequests: grant("requests"),
          reservedTokens: grant("tokens"),
        },
      })
      .returning({ requests: u.requests, tokens: u.tokens, gotRequests: u.reservedRequests, gotTokens: u.reservedTokens });
    return { got: { requests: Number(row!.gotRequests), tokens: Number(row!.gotTokens) }, total: { requests: Number(row!.requests), tokens: Number(row!.tokens) } };
  }

  /** Gives back budget held idle, adds tokens owed, and (once a window) deletes the rows of past windows. */
  private async sync(): Promise<void> {
    if (this.syncing) return;
    this.syncing = true;
    const limiter = this.limiter;
    try {
      const now = Date.now();
      const deltas = limiter.takeDeltas(now);
      for (let i = 0; i < deltas.length; i++) {
        const d = deltas[i]!;
        try {
          const r = await this.take({ ...d, need: { requests: 0, tokens: 0 }, want: { requests: 0, tokens: 0 } });
          limiter.learned(d.keyId, d.windowStart, r.total);
        } catch (e) {
          // Kept for the next sync (or the key's next take).
          for (const rest of deltas.slice(i)) limiter.restore(rest);
          throw e;
        }
      }
      const windowMs = limiter.windowMs;
      if (now - this.lastCleanup > windowMs) {
        this.lastCleanup = now;
        const u = this.ctx.db.t.keyUsage;
        await this.ctx.db.delete(u).where(lt(u.windowStart, sql`${now - (now % windowMs) - 2 * windowMs}`));
      }
    } catch (e) {
      this.ctx.log.error("key usage sync failed", { error: String(e) });
    } finally {
      this.syncing = false;
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}

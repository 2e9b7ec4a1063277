// Per-key limits on a cluster (Postgres, docs/CONTRACT.md §14/§17: a key's
// rpm/tpm hold cluster-wide within 10%; ./rateLimit.ts is what callers see,
// ./localLimiter.ts the one-node limiter): windows are whole wall-clock
// minutes on every node, and each
// node admits out of budget it has taken from the key's row for the window
// in the database (src/nodes/keyUsage.ts: one INSERT … ON CONFLICT DO
// UPDATE … RETURNING that gives no more than the window has left, so what
// all nodes are given together never passes the limit, whatever each node
// thinks of the others). A request that finds budget in hand is admitted
// at once, with no database round trip; one that finds none waits for a
// take (one statement, shared by every request waiting on this node for
// the key), which asks for a block: a 2·nodes-th part of what the window
// had left at the last answer (a sixth for three nodes), or what the
// waiting requests need if more. Blocks shrink as the window empties: a
// few statements a window per busy node, not one a request. Budget a node
// holds but does not use (no request for IDLE_MS), or more than it will use
// before the window ends at the pace it has had, is given back at the next
// sync (every 250 ms), so a node that took a block and then saw little or
// no traffic strands little. Tokens an answer used beyond the node's hand
// (completion tokens, counted after the fact) are owed to the row and added
// with the next statement. When the row said the window is spent, requests
// are refused here (429) without asking again for RECHECK_MS. If the
// database does not answer, each node admits up to its even share of the
// window meanwhile, and owes it to the row once the database is back.
//
// Why not the earlier design (each node published its counts a few times a
// second and admitted an estimated share of what the others had left, split
// over the live nodes): the shares were guesses, and they added up to more
// or less than the limit. A node's list of live nodes is its own reading of
// the heartbeats, a second apart, so just after nodes start or join the
// shares were computed over different counts (a burst of 120 at three nodes
// that had just started: 93 admitted for rpm 60); and each node's even share
// stayed reserved for it even when it got no traffic (one node that sees
// one request a minute: 41 admitted every minute). Measured with
// bench/cluster-rpm.ts and test/cluster-rpm.test.ts. Taking budget
// atomically cannot over-admit (beyond tokens counted after the answer);
// giving back what is idle or beyond a node's pace keeps under-admission to
// what nodes hold in the last moments of a window, or hold when they die.
import type { Budget, BudgetStore } from "./budgetStore";
import { rateHeaders, rateRefusal, type KeyWindow, type Limits, type RateLimiter } from "./rateLimit";

interface Waiter {
  tokens: number;
  limits: Limits;
  resolve: (headers: Record<string, string>) => void;
  reject: (e: unknown) => void;
}

/** A cluster node's part of a key's window. */
interface Share {
  limits: Limits;
  /** Budget taken from the row and not used yet. */
  held: Budget;
  /** What the cluster had taken of the window at the last answer, and when that answer came (0: none yet). */
  total: Budget;
  totalAt: number;
  /** To apply to the row with the next statement: given back (−) or owed (+). */
  delta: Budget;
  waiters: Waiter[];
  taking: boolean;
  /** Last admission (or refund) here: budget held this long unused is given back. */
  lastUse: number;
  /** First admission here in the window (the node's pace since then says what it will still use). */
  firstUse: number;
}

/** A key's window on a cluster: a whole wall-clock minute on every node; a limited key's has this node's share of it. */
interface Window extends KeyWindow {
  share?: Share;
}

/** Budget a node holds unused for this long is given back (src/nodes/keyUsage.ts, at its next sync). */
export const IDLE_MS = 1000;
/** Budget held beyond what the node's pace (measured over at least this long) will use before the window ends is given back too. */
const PACE_MS = 1000;
/** A window the row says is spent refuses requests here, without asking again, for this long. */
const RECHECK_MS = 250;
/** A take that has not answered by then is treated as failed (the database is away): the node admits out of its own share meanwhile. */
const TAKE_TIMEOUT_MS = 2000;
/** After a take failed, how long requests go by the node's own share without asking the database. */
const DOWN_MS = 1000;
/** After a take timed out, how long at most requests go by the node's own share while it has not answered. */
const STALLED_MS = 30_000;

const ZERO: Budget = { requests: 0, tokens: 0 };
const isZero = (b: Budget) => b.requests === 0 && b.tokens === 0;

export class ClusterBudget implements RateLimiter {
  private readonly windows = new Map<string, Window>();
  /** The key's rows in the database (src/nodes/keyUsage.ts), connected once it starts, before the server answers. */
  private store: BudgetStore | null = null;
  /** Until then takes are not tried (the last one failed, or one timed out and has not answered since): each node admits out of its even share. */
  private downUntil = 0;
  private stalledUntil = 0;
  /** Notified when a take fails (the first of a run of failures). */
  onStoreError: (e: unknown) => void = () => {};

  constructor(readonly windowMs = 60_000) {}

  /** The database side (src/nodes/keyUsage.ts): connected before the server answers requests. */
  connect(store: BudgetStore): void {
    this.store = store;
  }

  private window(keyId: string, now: number): Window {
    let w = this.windows.get(keyId);
    if (!w || now - w.start >= this.windowMs) {
      w = { start: now - (now % this.windowMs), requests: 0, tokens: 0 };
      this.windows.set(keyId, w);
      if (this.windows.size > 100_000) this.prune(now);
    }
    return w;
  }

  private prune(now: number): void {
    for (const [k, w] of this.windows) if (now - w.start >= this.windowMs && !w.share?.taking && !w.share?.waiters.length) this.windows.delete(k);
  }

  /** A limited key's request is admitted out of the node's share; an unlimited key's is only counted (until connected, as on one node). */
  admit(keyId: string, limits: Limits, tokens: number, now = Date.now()): Record<string, string> | Promise<Record<string, string>> {
    const w = this.window(keyId, now);
    if (this.store && (limits.rpm !== null || limits.tpm !== null)) return this.admitShared(keyId, w, limits, tokens, now);
    const overRequests = limits.rpm !== null && w.requests + 1 > limits.rpm;
    if (overRequests || (limits.tpm !== null && w.tokens + tokens > limits.tpm)) throw this.refusal(w, limits, overRequests, now);
    w.requests++;
    w.tokens += tokens;
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  private refusal(w: Window, limits: Limits, requests: boolean, now: number) {
    const resetMs = w.start + this.windowMs - now;
    return rateRefusal(limits, this.headers(w, limits, resetMs), requests, resetMs);
  }

  private admitShared(keyId: string, w: Window, limits: Limits, tokens: number, now: number): Record<string, string> | Promise<Record<string, string>> {
    const s = (w.share ??= { limits, held: { ...ZERO }, total: { ...ZERO }, totalAt: 0, delta: { ...ZERO }, waiters: [], taking: false, lastUse: now, firstUse: now });
    s.limits = limits;
    if (s.waiters.length === 0) {
      if (this.fits(s, limits, tokens)) return this.consume(w, s, limits, tokens, now);
      const short = this.short(s, limits, tokens, now);
      if (short) throw this.refusal(w, limits, short === "requests", now);
    }
    return new Promise((resolve, reject) => {
      s.waiters.push({ tokens, limits, resolve, reject });
      this.take(keyId, w);
    });
  }

  private fits(s: Share, limits: Limits, tokens: number): boolean {
    return (limits.rpm === null || s.held.requests >= 1) && (limits.tpm === null || s.held.tokens >= tokens);
  }

  /** Which limit the window is known (from a recent answer, or the database being away) to lack the budget for this request, if any. */
  private short(s: Share, limits: Limits, tokens: number, now: number): "requests" | "tokens" | null {
    const down = this.down(now);
    if (!down && (s.totalAt === 0 || now - s.totalAt >= RECHECK_MS)) return null;
    const lacks = (limit: number | null, held: number, need: number, total: number, delta: number) =>
      limit !== null && held < need && (down || limit - total - delta < need - held);
    if (lacks(limits.rpm, s.held.requests, 1, s.total.requests, s.delta.requests)) return "requests";
    if (lacks(limits.tpm, s.held.tokens, tokens, s.total.tokens, s.delta.tokens)) return "tokens";
    return null;
  }

  private consume(w: Window, s: Share, limits: Limits, tokens: number, now: number): Record<string, string> {
    if (limits.rpm !== null) s.held.requests--;
    if (limits.tpm !== null) s.held.tokens -= tokens;
    s.lastUse = now;
    w.requests++;
    w.tokens += tokens;
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  /** Takes budget for the waiting requests (one statement at a time per key), then serves them. */
  private take(keyId: string, w: Window): void {
    const s = w.share!;
    if (s.taking) return;
    const store = this.store!;
    const now = Date.now();
    const limits = s.limits;
    const head = s.waiters[0]!;
    let wantRequests = 0;
    let wantTokens = 0;
    for (const x of s.waiters) {
      wantRequests += 1;
      wantTokens += x.tokens;
    }
    const nodes = Math.max(1, store.nodes());
    // A block: a 2·nodes-th part of what the window had left at the last answer (all of it before any).
    const block = (limit: number, total: number, delta: number) => Math.floor(Math.max(0, limit - total - delta) / (2 * nodes));
    const dim = (limit: number | null, held: number, headNeed: number, all: number, total: number, delta: number) =>
      limit === null ? { need: 0, want: 0 } : { need: Math.max(0, headNeed - held), want: Math.max(0, all - held, headNeed - held, block(limit, total, delta)) };
    const r = dim(limits.rpm, s.held.requests, 1, wantRequests, s.total.requests, s.delta.requests);
    const t = dim(limits.tpm, s.held.tokens, head.tokens, wantTokens, s.total.tokens, s.delta.tokens);
    if (this.down(now)) {
      this.ownShare(w, s, nodes);
      this.serve(keyId, w);
      return;
    }
    s.taking = true;
    const delta = s.delta;
    s.delta = { ...ZERO };
    let settled = false;
    const done = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.taking = false;
      this.serve(keyId, w);
    };
    const timer = setTimeout(() => {
      // Not asked again while this one hangs (each request would wait as long).
      this.failed(new Error(`no answer from the database within ${TAKE_TIMEOUT_MS} ms`));
      this.stalledUntil = Date.now() + STALLED_MS;
      this.ownShare(w, s, nodes);
      done();
    }, TAKE_TIMEOUT_MS);
    store.take({ keyId, windowStart: w.start, limits, delta, need: { requests: r.need, tokens: t.need }, want: { requests: r.want, tokens: t.want } }).then(
      (got) => {
        // Even after a timeout: what the row gave is this node's.
        s.held.requests += got.got.requests;
        s.held.tokens += got.got.tokens;
        s.total = got.total;
        s.totalAt = Date.now();
        this.downUntil = this.stalledUntil = 0;
        done();
      },
      (e: unknown) => {
        s.delta.requests += delta.requests;
        s.delta.tokens += delta.tokens;
        this.stalledUntil = 0;
        if (!settled) {
          this.failed(e);
          this.ownShare(w, s, nodes);
        }
        done();
      },
    );
  }

  private failed(e: unknown): void {
    if (!this.down(Date.now())) this.onStoreError(e);
    this.downUntil = Date.now() + DOWN_MS;
  }

  private down(now: number): boolean {
    return now < this.downUntil || now < this.stalledUntil;
  }

  /**
   * The database is away: the node may admit up to its even share of the
   * window (counting what it admitted and holds already), and owes what it
   * gives itself that way (added to the row when the database is back).
   */
  private ownShare(w: Window, s: Share, nodes: number): void {
    const top = (limit: number | null, used: number, held: number) => (limit === null ? 0 : Math.max(0, Math.ceil(limit / nodes) - used - held));
    const requests = top(s.limits.rpm, w.requests, s.held.requests);
    const tokens = top(s.limits.tpm, w.tokens, s.held.tokens);
    s.held.requests += requests;
    s.held.tokens += tokens;
    s.delta.requests += requests;
    s.delta.tokens += tokens;
  }

  /** After a take: the waiting requests in order, admitted while the budget in hand lasts; refused where the window is known spent; else another take. */
  private serve(keyId: string, w: Window): void {
    const s = w.share!;
    while (s.waiters.length > 0) {
      const x = s.waiters[0]!;
      const now = Date.now();
      if (this.fits(s, x.limits, x.tokens)) {
        s.waiters.shift();
        x.resolve(this.consume(w, s, x.limits, x.tokens, now));
        continue;
      }
      const short = this.short(s, x.limits, x.tokens, now);
      if (short) {
        s.waiters.shift();
        x.reject(this.refusal(w, x.limits, short === "requests", now));
        continue;
      }
      this.take(keyId, w);
      return;
    }
  }

  /**
   * For the sync (src/nodes/keyUsage.ts): what to apply to the keys' rows
   * of the current windows — budget held unused for IDLE_MS given back, or
   * what the node will not use before the window ends at its pace so far;
   * tokens owed — taken out of the limiter (hand it back with `restore` if
   * the statement fails).
   */
  takeDeltas(now = Date.now()): { keyId: string; windowStart: number; limits: Limits; delta: Budget }[] {
    const out: { keyId: string; windowStart: number; limits: Limits; delta: Budget }[] = [];
    for (const [keyId, w] of this.windows) {
      const s = w.share;
      if (!s || now - w.start >= this.windowMs) continue;
      if (!s.taking && s.waiters.length === 0 && !this.down(now)) {
        if (now - s.lastUse >= IDLE_MS) this.giveBack(s, { ...s.held });
        else if (now - s.firstUse >= PACE_MS) {
          // More than this node will use before the window ends, at its pace so far (with half again to spare): the rest goes back.
          const left = w.start + this.windowMs - now;
          const keep = (used: number) => Math.ceil(((1.5 * used) / (now - s.firstUse)) * left) + 1;
          this.giveBack(s, { requests: Math.max(0, s.held.requests - keep(w.requests)), tokens: Math.max(0, s.held.tokens - keep(w.tokens)) });
        }
      }
      if (isZero(s.delta) || s.taking) continue;
      out.push({ keyId, windowStart: w.start, limits: s.limits, delta: s.delta });
      s.delta = { ...ZERO };
    }
    return out;
  }

  private giveBack(s: Share, b: Budget): void {
    s.held.requests -= b.requests;
    s.held.tokens -= b.tokens;
    s.delta.requests -= b.requests;
    s.delta.tokens -= b.tokens;
  }

  /** A delta from `takeDeltas` that could not be applied: kept for the next statement (if its window is still current). */
  restore(d: { keyId: string; windowStart: number; delta: Budget }): void {
    const s = this.windows.get(d.keyId)?.start === d.windowStart ? this.windows.get(d.keyId)!.share : undefined;
    if (!s) return;
    s.delta.requests += d.delta.requests;
    s.delta.tokens += d.delta.tokens;
  }

  /** The answer to a statement of the sync: what the cluster has taken of the window (for the headers and `short`). */
  learned(keyId: string, windowStart: number, total: Budget, now = Date.now()): void {
    const w = this.windows.get(keyId);
    if (!w?.share || w.start !== windowStart || w.share.taking) return;
    w.share.total = total;
    w.share.totalAt = now;
  }

  // ── what callers use (./rateLimit.ts) ─────────────────────────────────

  refund(keyId: string, limits: Limits, tokens: number, admittedAt: number, now = Date.now()): Record<string, string> | null {
    const w = this.windows.get(keyId);
    if (!w || w.start > admittedAt || now - w.start >= this.windowMs) return null;
    w.requests = Math.max(0, w.requests - 1);
    w.tokens = Math.max(0, w.tokens - tokens);
    const s = w.share;
    if (s) {
      // Back in this node's hand (the row still counts it taken).
      if (limits.rpm !== null) s.held.requests++;
      if (limits.tpm !== null) s.held.tokens += tokens;
      s.lastUse = now;
    }
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  current(keyId: string, limits: Limits, now = Date.now()): Record<string, string> {
    const w = this.windows.get(keyId);
    if (!w || now - w.start >= this.windowMs) return this.headers({ start: now, requests: 0, tokens: 0 }, limits, this.windowMs);
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  charge(keyId: string, tokens: number): void {
    const w = this.windows.get(keyId);
    if (!w) return;
    w.tokens += tokens;
    const s = w.share;
    if (!s || s.limits.tpm === null || Date.now() - w.start >= this.windowMs) return;
    // Out of the node's hand; past it, owed to the row.
    const fromHand = Math.min(tokens, Math.max(0, s.held.tokens));
    s.held.tokens -= fromHand;
    s.delta.tokens += tokens - fromHand;
  }

  private headers(w: Window, limits: Limits, resetMs: number): Record<string, string> {
    const s = w.share;
    // A limited key: what the window has left by the last answer, plus what this node holds.
    return rateHeaders(limits, resetMs, (d, limit) => (s ? limit - s.total[d] - s.delta[d] + s.held[d] : limit - w[d]));
  }
}

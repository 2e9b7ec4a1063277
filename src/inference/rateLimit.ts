// Per-key request and token limits over one-minute windows. A key's own
// rate_limits win; otherwise the configured defaults; neither: unlimited.
// Interactive requests only: batch lines are paced by the scheduler instead.
//
// On a cluster (SPEC §14) the limits are the cluster's: windows are whole
// wall-clock minutes on every node, and each node publishes its counts and
// reads the others' a few times a second (src/nodes/keyUsage.ts, never per
// request). Between two reads a node admits at most its allowance: its
// share (split over the live nodes as a model's concurrency is) of what the
// key has left once everyone's counts and everyone else's unused
// allowances are taken off. Allowances are published with the counts, so a
// node never hands out budget another node may still spend; only nodes
// that recompute at the same moment can overlap, by at most their shares.
import { ApiError } from "../errors";

interface Window {
  start: number;
  requests: number;
  tokens: number;
  /** Cluster: the other nodes' counts in this window, and what this node may still admit until the next sync. */
  others?: Others;
  /** Cluster: when this node first admitted the key in this window. */
  firstAt?: number;
  allowance?: { requests: number; tokens: number; requestsAt: number; tokensAt: number };
  /** Cluster: counts changed since they were last published. */
  dirty?: boolean;
}

/** What a node publishes of a key (src/nodes/keyUsage.ts). */
export interface UsageRow {
  keyId: string;
  windowStart: number;
  requests: number;
  tokens: number;
  reservedRequests: number;
  reservedTokens: number;
}

/** The other nodes' use of a key in a window: counts plus unused allowances, and how many nodes have published it. */
export interface Others {
  requests: number;
  tokens: number;
  nodes: number;
}

/** What a node learns of the others at a sync (src/nodes/keyUsage.ts). */
export interface ClusterCounts {
  windowStart: number;
  /** The other nodes' counts in that window plus their unused allowances, by key. */
  others: Map<string, Others>;
  /** This node's place among the live nodes, and their number. */
  index: number;
  nodes: number;
}

export interface Limits {
  rpm: number | null;
  tpm: number | null;
}

export const WINDOW_MS = 60_000;
const NONE: Others = { requests: 0, tokens: 0, nodes: 0 };
/**
 * A node publishes a key within a sync (≈250 ms) of its first admission of
 * it. For this long after this node's own first admission in a window,
 * live nodes that have not published the key yet may hold the first share
 * they took without knowing of the others, and are counted as holding it.
 */
const UNSEEN_MS = 1000;

export class RateLimiter {
  private readonly windows = new Map<string, Window>();
  /** Set on a cluster: windows are aligned to the minute, and the others' counts are added. */
  private cluster: { last: ClusterCounts | null; limits: Map<string, Limits> } | null = null;

  /** Cluster mode (a Postgres database): see the file's comment. */
  enableCluster(): void {
    this.cluster = { last: null, limits: new Map() };
  }

  private window(keyId: string, now: number): Window {
    let w = this.windows.get(keyId);
    if (!w || now - w.start >= WINDOW_MS) {
      const start = this.cluster ? now - (now % WINDOW_MS) : now;
      w = { start, requests: 0, tokens: 0 };
      if (this.cluster) this.seed(keyId, w);
      this.windows.set(keyId, w);
      if (this.windows.size > 100_000) this.prune(now);
    }
    return w;
  }

  private prune(now: number): void {
    for (const [k, w] of this.windows) if (now - w.start >= WINDOW_MS) this.windows.delete(k);
  }

  /**
   * Admits a request expected to use `tokens` prompt tokens, or throws 429
   * with retry-after. Returns the x-ratelimit-* headers for the response.
   */
  admit(keyId: string, limits: Limits, tokens: number, now = Date.now()): Record<string, string> {
    const w = this.window(keyId, now);
    const resetMs = w.start + WINDOW_MS - now;
    if (this.cluster) {
      w.firstAt ??= now;
      if (!w.allowance) this.seed(keyId, w, limits, now);
    }
    const o = w.others ?? NONE;
    const a = w.allowance;
    const over =
      (limits.rpm !== null && (w.requests + o.requests + 1 > limits.rpm || (a !== undefined && w.requests - a.requestsAt + 1 > a.requests))) ||
      (limits.tpm !== null && (w.tokens + o.tokens + tokens > limits.tpm || (a !== undefined && w.tokens - a.tokensAt + tokens > a.tokens)));
    if (over) {
      const headers = this.headers(w, limits, resetMs);
      headers["retry-after"] = String(Math.max(1, Math.ceil(resetMs / 1000)));
      const which = limits.rpm !== null && w.requests + 1 > limits.rpm ? `${limits.rpm} requests` : `${limits.tpm} tokens`;
      throw new ApiError("rate_limit_exceeded", `Rate limit reached: ${which} per minute for this key. Retry after ${headers["retry-after"]} s.`, { headers });
    }
    w.requests++;
    w.tokens += tokens;
    if (this.cluster) {
      w.dirty = true;
      this.cluster.limits.set(keyId, limits);
    }
    return this.headers(w, limits, resetMs);
  }

  // ── cluster ─────────────────────────────────────────────────────────────

  /** This node's counts (and unused allowances) that changed since the last call, for the current minute (to publish). */
  takeChanged(now = Date.now()): UsageRow[] {
    const out: UsageRow[] = [];
    for (const [keyId, w] of this.windows) {
      if (!w.dirty || now - w.start >= WINDOW_MS) continue;
      w.dirty = false;
      const a = w.allowance;
      const unused = (limit: number, used: number) => (Number.isFinite(limit) ? Math.max(0, limit - used) : 0);
      out.push({
        keyId,
        windowStart: w.start,
        requests: w.requests,
        tokens: w.tokens,
        reservedRequests: a ? unused(a.requests, w.requests - a.requestsAt) : 0,
        reservedTokens: a ? unused(a.tokens, w.tokens - a.tokensAt) : 0,
      });
    }
    return out;
  }

  /** What the others counted (read after publishing ours): every key's window takes it, and a new allowance. */
  applyCluster(c: ClusterCounts): void {
    if (!this.cluster) return;
    this.cluster.last = c;
    for (const [keyId, w] of this.windows) if (w.start === c.windowStart) this.seed(keyId, w);
  }

  /**
   * A window takes the others' counts of the last sync (none yet in a
   * minute no sync has seen) and, if the key's limits are known, this
   * node's share of what is left: until the next sync it admits no more.
   */
  private seed(keyId: string, w: Window, known?: Limits, now = Date.now()): void {
    const c = this.cluster!.last;
    if (!c) return;
    const o = c.windowStart === w.start ? (c.others.get(keyId) ?? NONE) : NONE;
    w.others = o;
    const limits = known ?? this.cluster!.limits.get(keyId);
    if (!limits) return;
    const share = (left: number) => Math.floor(left / c.nodes) + (c.index < left % c.nodes ? 1 : 0);
    const before = w.allowance;
    // Early in this node's use of the key, nodes not heard from yet may hold
    // the first share each took (before anyone had published). This node's
    // own first share is taken the same way, from the others it knows of.
    const unseen = before && w.firstAt !== undefined && now - w.firstAt < UNSEEN_MS ? Math.max(0, c.nodes - 1 - o.nodes) : 0;
    const left = (limit: number, used: number, theirs: number) => Math.max(0, limit - used - theirs - unseen * Math.ceil(limit / c.nodes));
    // What this node was allowed and has not used is published: the others
    // leave it alone, so it is kept; only new budget is split.
    const keep = (limit: number, at: number, used: number) => (before ? Math.max(0, limit - (used - at)) : 0);
    w.allowance = {
      requests: limits.rpm === null ? Infinity : Math.max(keep(before?.requests ?? 0, before?.requestsAt ?? 0, w.requests), share(left(limits.rpm, w.requests, o.requests))),
      tokens: limits.tpm === null ? Infinity : Math.max(keep(before?.tokens ?? 0, before?.tokensAt ?? 0, w.tokens), share(left(limits.tpm, w.tokens, o.tokens))),
      requestsAt: w.requests,
      tokensAt: w.tokens,
    };
    // The others must learn a new allowance (they leave it to this node).
    const unused = (x: { requests: number; tokens: number; requestsAt: number; tokensAt: number } | undefined) =>
      x ? `${x.requests - (w.requests - x.requestsAt)}/${x.tokens - (w.tokens - x.tokensAt)}` : "";
    if (unused(before) !== unused(w.allowance)) w.dirty = true;
  }

  /**
   * Gives back what `admit` counted for a request that then did not run (the
   * model's queue was full, 529, or the client left while queued), if the
   * window it was counted in is still current. Returns the updated headers.
   */
  refund(keyId: string, limits: Limits, tokens: number, admittedAt: number, now = Date.now()): Record<string, string> | null {
    const w = this.windows.get(keyId);
    if (!w || w.start > admittedAt || now - w.start >= WINDOW_MS) return null;
    w.requests = Math.max(0, w.requests - 1);
    w.tokens = Math.max(0, w.tokens - tokens);
    if (this.cluster) w.dirty = true;
    return this.headers(w, limits, w.start + WINDOW_MS - now);
  }

  /** The x-ratelimit-* headers as the key's window stands, counting nothing (for answers that cost no quota: 400, 404). */
  current(keyId: string, limits: Limits, now = Date.now()): Record<string, string> {
    const w = this.windows.get(keyId);
    if (!w || now - w.start >= WINDOW_MS) return this.headers({ start: now, requests: 0, tokens: 0 }, limits, WINDOW_MS);
    return this.headers(w, limits, w.start + WINDOW_MS - now);
  }

  /** Adds tokens learned after the answer (completion tokens). */
  charge(keyId: string, tokens: number): void {
    const w = this.windows.get(keyId);
    if (!w) return;
    w.tokens += tokens;
    if (this.cluster) w.dirty = true;
  }

  private headers(w: Window, limits: Limits, resetMs: number): Record<string, string> {
    const h: Record<string, string> = {};
    const reset = `${Math.max(0, Math.ceil(resetMs / 1000))}s`;
    const o = w.others ?? NONE;
    if (limits.rpm !== null) {
      h["x-ratelimit-limit-requests"] = String(limits.rpm);
      h["x-ratelimit-remaining-requests"] = String(Math.max(0, limits.rpm - w.requests - o.requests));
      h["x-ratelimit-reset-requests"] = reset;
    }
    if (limits.tpm !== null) {
      h["x-ratelimit-limit-tokens"] = String(limits.tpm);
      h["x-ratelimit-remaining-tokens"] = String(Math.max(0, limits.tpm - w.tokens - o.tokens));
      h["x-ratelimit-reset-tokens"] = reset;
    }
    return h;
  }
}

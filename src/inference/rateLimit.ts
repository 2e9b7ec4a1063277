// Per-key request and token limits over one-minute windows. A key's own
// rate_limits win; otherwise the configured defaults; neither: unlimited.
// Interactive requests only: batch lines are paced by the scheduler instead.
import { ApiError } from "../errors";

interface Window {
  start: number;
  requests: number;
  tokens: number;
}

export interface Limits {
  rpm: number | null;
  tpm: number | null;
}

const WINDOW_MS = 60_000;

export class RateLimiter {
  private readonly windows = new Map<string, Window>();

  private window(keyId: string, now: number): Window {
    let w = this.windows.get(keyId);
    if (!w || now - w.start >= WINDOW_MS) {
      w = { start: now, requests: 0, tokens: 0 };
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
    const over = (limits.rpm !== null && w.requests + 1 > limits.rpm) || (limits.tpm !== null && w.tokens + tokens > limits.tpm);
    if (over) {
      const headers = this.headers(w, limits, resetMs);
      headers["retry-after"] = String(Math.max(1, Math.ceil(resetMs / 1000)));
      const which = limits.rpm !== null && w.requests + 1 > limits.rpm ? `${limits.rpm} requests` : `${limits.tpm} tokens`;
      throw new ApiError("rate_limit_exceeded", `Rate limit reached: ${which} per minute for this key. Retry after ${headers["retry-after"]} s.`, { headers });
    }
    w.requests++;
    w.tokens += tokens;
    return this.headers(w, limits, resetMs);
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
    if (w) w.tokens += tokens;
  }

  private headers(w: Window, limits: Limits, resetMs: number): Record<string, string> {
    const h: Record<string, string> = {};
    const reset = `${Math.max(0, Math.ceil(resetMs / 1000))}s`;
    if (limits.rpm !== null) {
      h["x-ratelimit-limit-requests"] = String(limits.rpm);
      h["x-ratelimit-remaining-requests"] = String(Math.max(0, limits.rpm - w.requests));
      h["x-ratelimit-reset-requests"] = reset;
    }
    if (limits.tpm !== null) {
      h["x-ratelimit-limit-tokens"] = String(limits.tpm);
      h["x-ratelimit-remaining-tokens"] = String(Math.max(0, limits.tpm - w.tokens));
      h["x-ratelimit-reset-tokens"] = reset;
    }
    return h;
  }
}

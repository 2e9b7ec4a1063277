// Per-key limits on one node (SQLite): a key's window starts at its first
// request, and the counts here are the whole truth (./rateLimit.ts).
import { rateHeaders, rateRefusal, type KeyWindow, type Limits, type RateLimiter } from "./rateLimit";

export class LocalLimiter implements RateLimiter {
  private readonly windows = new Map<string, KeyWindow>();

  constructor(readonly windowMs = 60_000) {}

  private window(keyId: string, now: number): KeyWindow {
    let w = this.windows.get(keyId);
    if (!w || now - w.start >= this.windowMs) {
      w = { start: now, requests: 0, tokens: 0 };
      this.windows.set(keyId, w);
      if (this.windows.size > 100_000) this.prune(now);
    }
    return w;
  }

  private prune(now: number): void {
    for (const [k, w] of this.windows) if (now - w.start >= this.windowMs) this.windows.delete(k);
  }

  admit(keyId: string, limits: Limits, tokens: number, now = Date.now()): Record<string, string> {
    const w = this.window(keyId, now);
    const overRequests = limits.rpm !== null && w.requests + 1 > limits.rpm;
    if (overRequests || (limits.tpm !== null && w.tokens + tokens > limits.tpm)) {
      const resetMs = w.start + this.windowMs - now;
      throw rateRefusal(limits, this.headers(w, limits, resetMs), overRequests, resetMs);
    }
    w.requests++;
    w.tokens += tokens;
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  refund(keyId: string, limits: Limits, tokens: number, admittedAt: number, now = Date.now()): Record<string, string> | null {
    const w = this.windows.get(keyId);
    if (!w || w.start > admittedAt || now - w.start >= this.windowMs) return null;
    w.requests = Math.max(0, w.requests - 1);
    w.tokens = Math.max(0, w.tokens - tokens);
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  current(keyId: string, limits: Limits, now = Date.now()): Record<string, string> {
    const w = this.windows.get(keyId);
    if (!w || now - w.start >= this.windowMs) return this.headers({ start: now, requests: 0, tokens: 0 }, limits, this.windowMs);
    return this.headers(w, limits, w.start + this.windowMs - now);
  }

  charge(keyId: string, tokens: number): void {
    const w = this.windows.get(keyId);
    if (w) w.tokens += tokens;
  }

  private headers(w: KeyWindow, limits: Limits, resetMs: number): Record<string, string> {
    return rateHeaders(limits, resetMs, (dimension, limit) => limit - w[dimension]);
  }
}

// Per-key request and token limits over one-minute windows: what callers
// (admission, the services that count completion tokens) use, whichever
// limiter the server picked at start (src/server.ts):
//
// - one node (SQLite): ./localLimiter.ts, whose counts are the whole truth;
// - a cluster (Postgres, docs/CONTRACT.md §14/§17: a key's rpm/tpm hold
//   cluster-wide within 10%): ./clusterBudget.ts, which admits out of
//   budget taken from the key's row in the database.
//
// A key's own rate_limits win; otherwise the configured defaults; neither:
// unlimited. Interactive requests only: batch lines are paced by the
// scheduler instead. The window's length is config.rateLimitMinuteSeconds
// (60; shortened only by tests).
import { ApiError } from "../../errors";

export interface Limits {
  rpm: number | null;
  tpm: number | null;
}

export interface RateLimiter {
  /** The length of a window (ms). */
  readonly windowMs: number;
  /**
   * Admits a request expected to use `tokens` prompt tokens, or throws 429
   * with retry-after. Returns the x-ratelimit-* headers for the response:
   * at once, or (a cluster node with no budget in hand for the key) once
   * budget is taken from the database.
   */
  admit(keyId: string, limits: Limits, tokens: number, now?: number): Record<string, string> | Promise<Record<string, string>>;
  /**
   * Gives back what `admit` counted for a request that then did not run (the
   * model's queue was full, 529, or the client left while queued), if the
   * window it was counted in is still current. Returns the updated headers.
   */
  refund(keyId: string, limits: Limits, tokens: number, admittedAt: number, now?: number): Record<string, string> | null;
  /** The x-ratelimit-* headers as the key's window stands, counting nothing (for answers that cost no quota: 400, 404). */
  current(keyId: string, limits: Limits, now?: number): Record<string, string>;
  /** Adds tokens learned after the answer (completion tokens). */
  charge(keyId: string, tokens: number): void;
}

/** What a key's current window has admitted on this node. */
export interface KeyWindow {
  start: number;
  requests: number;
  tokens: number;
}

/** The x-ratelimit-* headers of the limited dimensions; `remaining` says what is left of a limit (floored at 0 here). */
export function rateHeaders(limits: Limits, resetMs: number, remaining: (dimension: "requests" | "tokens", limit: number) => number): Record<string, string> {
  const h: Record<string, string> = {};
  const reset = `${Math.max(0, Math.ceil(resetMs / 1000))}s`;
  if (limits.rpm !== null) {
    h["x-ratelimit-limit-requests"] = String(limits.rpm);
    h["x-ratelimit-remaining-requests"] = String(Math.max(0, remaining("requests", limits.rpm)));
    h["x-ratelimit-reset-requests"] = reset;
  }
  if (limits.tpm !== null) {
    h["x-ratelimit-limit-tokens"] = String(limits.tpm);
    h["x-ratelimit-remaining-tokens"] = String(Math.max(0, remaining("tokens", limits.tpm)));
    h["x-ratelimit-reset-tokens"] = reset;
  }
  return h;
}

/** The 429 for a request over the key's limit (`requests`: the rpm, else the tpm), with the window's headers and retry-after. */
export function rateRefusal(limits: Limits, headers: Record<string, string>, requests: boolean, resetMs: number): ApiError {
  headers["retry-after"] = String(Math.max(1, Math.ceil(resetMs / 1000)));
  const which = requests ? `${limits.rpm} requests` : `${limits.tpm} tokens`;
  return new ApiError("rate_limit_exceeded", `Rate limit reached: ${which} per minute for this key. Retry after ${headers["retry-after"]} s.`, { headers });
}

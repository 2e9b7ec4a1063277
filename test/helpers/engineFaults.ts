// Fault plans of the engine (./engineReplicas.ts): per request, a plan sees
// the request's content (./engineAnswers.ts contentOf) and how many times
// that content was already received, and answers with an HTTP error
// (optionally with retry-after) or closes the connection without an answer.
// The plan is consulted just before the answer's first byte: after the
// request's work (its latency), or at once for a stream whose headers leave
// before its work is done. Deterministic: the "random" plans hash content and
// attempt, so the same inputs fail the same way on every run.

export type EngineFailure =
  /** Answer with this status (and an OpenAI error body unless `body` is given). */
  | { status: number; retryAfter?: number | string; body?: unknown }
  /** Drop the connection without an HTTP answer (the client sees ECONNRESET). */
  | "close";

export interface PlannedRequest {
  /** "/chat/completions", "/embeddings", "/responses" or "/completions" (without /v1). */
  path: string;
  /** The content the request is counted by. */
  content: string;
  /** 1 for the first time this content is received, 2 for the second… (1 always without countContents). */
  attempt: number;
  body: Record<string, unknown>;
}

/** Decides how to answer one request: a failure, or null/undefined to answer normally. */
export type FailPlan = (req: PlannedRequest) => EngineFailure | null | undefined;

/** A stable 32-bit hash of a string (FNV-1a), for choosing a share of requests deterministically. */
export function hashOf(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** True for about `share` (0..1) of contents, always the same ones. */
export const inShare = (share: number) => (content: string) => hashOf(content) % 10_000 < share * 10_000;

/** True for about `share` of (content, attempt) pairs, always the same ones: a random-looking but reproducible failure. */
export const atRandom = (share: number, salt = "") => (content: string, attempt: number) => hashOf(`${salt}${attempt}#${content}`) % 10_000 < share * 10_000;

/** Building blocks for plans. */
export const plans = {
  /** Fail the first `k` attempts of every request whose content matches (default: all). */
  failFirst(k: number, failure: EngineFailure, match: (content: string) => boolean = () => true): FailPlan {
    return (r) => (r.attempt <= k && match(r.content) ? failure : null);
  },
  /** Always fail requests whose content matches. */
  always(failure: EngineFailure, match: (content: string) => boolean): FailPlan {
    return (r) => (match(r.content) ? failure : null);
  },
  /**
   * Fail about `share` of all attempts, chosen by a hash of content and
   * attempt number: the same run of failures every time for the same inputs
   * (e.g. 30% 503s). `salt` picks another deterministic sequence.
   */
  random(share: number, failure: EngineFailure, salt = ""): FailPlan {
    const hit = atRandom(share, salt);
    return (r) => (hit(r.content, r.attempt) ? failure : null);
  },
  /** Fail every request while `active()` is true (a phase the test starts and ends, e.g. 429 with retry-after). */
  when(active: () => boolean, failure: EngineFailure): FailPlan {
    return () => (active() ? failure : null);
  },
  /** The first plan that returns a failure wins. */
  first(...ps: FailPlan[]): FailPlan {
    return (r) => {
      for (const p of ps) {
        const f = p(r);
        if (f) return f;
      }
      return null;
    };
  },
};

/** An OpenAI error body for a failure without a body of its own (its message names the status). */
export function errorBody(status: number): unknown {
  const type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error";
  return { error: { message: `fake upstream says ${status}`, type, param: null, code: status === 429 ? "rate_limit_exceeded" : null } };
}

/** The answer a failure makes: its status (retry-after, body), or a connection dropped before any byte. */
export function failureResponse(failure: EngineFailure, headers: Record<string, string>): Response {
  // A body stream that errors before its first byte makes Bun drop the connection.
  if (failure === "close") return new Response(new ReadableStream({ start: (c) => c.error(undefined) }));
  const h = failure.retryAfter !== undefined ? { ...headers, "retry-after": String(failure.retryAfter) } : headers;
  return Response.json(failure.body ?? errorBody(failure.status), { status: failure.status, headers: h });
}

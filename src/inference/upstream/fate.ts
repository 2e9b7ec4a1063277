// What became of one call to an upstream, decided here for interactive
// requests and batch lines alike (docs/CONTRACT.md §11, §17). Every caller reads the
// same verdict and only chooses what to do with it:
//
//   answer          2xx. A batch line's answer goes to the output file.
//   invalid_answer  2xx whose body is not JSON (a proxy's HTML page): no
//                   answer, not retried, not an outage.
//   request_error   any other answer but 429 and 502/503/504: it is about
//                   this request. `retry` when sending it again may help
//                   (408, 409, 5xx): batch lines retry those, counted
//                   against max_attempts; any other 4xx is final, passed to
//                   the caller or written as the line's error.
//   engine_failure  the engine failing as a whole: connection refused or
//                   reset, no answer in time, an answer that is not HTTP
//                   (the strict client's UpstreamProtocolError, fetch's
//                   Malformed_HTTP_Response), 502/503/504. Counts toward the
//                   upstream's health; retried.
//   rate_limited    429, with its retry-after: the upstream's pace, not the
//                   request's fault.
//   cancelled       the caller went away first: nobody's fault, not counted.
import type { HeaderReader } from "./answer";
import { UpstreamConnectionError, UpstreamProtocolError } from "./httpClient";

export type FailureCause = "status" | "timeout" | "refused" | "connection" | "malformed";

export type Fate =
  | { readonly kind: "answer" }
  | { readonly kind: "invalid_answer" }
  | { readonly kind: "request_error"; readonly status: number; readonly retry: boolean; readonly retryAfterMs: number | null }
  | {
      readonly kind: "engine_failure";
      readonly cause: FailureCause;
      /** The answer's status (cause "status"), else null. */
      readonly status: number | null;
      readonly retryAfterMs: number | null;
      /** What the error said (empty for a status). */
      readonly detail: string;
    }
  | { readonly kind: "rate_limited"; readonly retryAfterMs: number | null }
  | { readonly kind: "cancelled" };

export type FateKind = Fate["kind"];

/** The two verdicts that need no detail: shared, so the common path allocates nothing. */
export const ANSWER: Fate = Object.freeze({ kind: "answer" });
export const INVALID_ANSWER: Fate = Object.freeze({ kind: "invalid_answer" });
export const CANCELLED: Fate = Object.freeze({ kind: "cancelled" });

/** A call that threw instead of answering (while sending, or while reading the body). */
export class CallFailure {
  constructor(
    readonly error: unknown,
    /** The call's own deadline ended it. */
    readonly timedOut = false,
    /** The caller (the interactive client) went away first. */
    readonly clientGone = false,
  ) {}
}

/** An answer's head: a fetch Response and an OwnAnswer are both one. */
export interface AnswerHead {
  readonly status: number;
  readonly headers: HeaderReader;
}

/**
 * The fate of one call: an answer's head (and, for a 2xx, whether its body
 * is JSON when the caller has read it), or the failure it threw.
 */
export function classify(result: AnswerHead | CallFailure, bodyIsJson = true): Fate {
  if (result instanceof CallFailure) return failureFate(result);
  const status = result.status;
  if (status >= 200 && status < 300) return bodyIsJson ? ANSWER : INVALID_ANSWER;
  const retryAfter = retryAfterMs(result.headers);
  if (status === 429) return { kind: "rate_limited", retryAfterMs: retryAfter };
  if (status === 502 || status === 503 || status === 504) return { kind: "engine_failure", cause: "status", status, retryAfterMs: retryAfter, detail: "" };
  return { kind: "request_error", status, retry: status === 408 || status === 409 || status >= 500, retryAfterMs: retryAfter };
}

function failureFate({ error, timedOut, clientGone }: CallFailure): Fate {
  if (clientGone) return CANCELLED;
  const e = error as { name?: string; code?: string; message?: string } | null | undefined;
  const detail = String(e?.message ?? error);
  const failure = (cause: FailureCause): Fate => ({ kind: "engine_failure", cause, status: null, retryAfterMs: null, detail });
  if (timedOut || e?.name === "TimeoutError") return failure("timeout");
  if (error instanceof UpstreamProtocolError || e?.code === "Malformed_HTTP_Response") return failure("malformed");
  if (e?.code === "ECONNREFUSED" || (error instanceof UpstreamConnectionError && error.code === "ECONNREFUSED")) return failure("refused");
  return failure("connection");
}

/**
 * System codes of a call that failed to connect: refused, or no address for
 * the host. No byte of the request left, so the engine cannot have started
 * it. A reset, a timeout or a 5xx is not among them: the engine may be
 * running the request by then.
 */
const NOT_CONNECTED = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * Whether a failed call never reached its engine (see NOT_CONNECTED): the
 * only failure an interactive request may be sent again for, to another
 * replica (./pass.ts callTarget). Both clients carry the system's code:
 * fetch's error and the strict client's UpstreamConnectionError.
 */
export function neverSent({ error, timedOut, clientGone }: CallFailure): boolean {
  if (timedOut || clientGone) return false;
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === "string" && NOT_CONNECTED.has(code);
}

/** Whether the fate says the engine failed as a whole (it counts toward the upstream going down). */
export const isEngineFailure = (fate: Fate): boolean => fate.kind === "engine_failure";

/**
 * What went wrong, said after "upstream" (a batch line's error message, an
 * upstream's last_error): "answered HTTP 503 to POST /chat/completions",
 * "timed out after 600000 ms", "unreachable: …"; empty for an answer.
 */
export function describe(fate: Fate, path: string, timeoutMs: number): string {
  switch (fate.kind) {
    case "engine_failure":
      if (fate.cause === "status") return `answered HTTP ${fate.status} to POST ${path}`;
      if (fate.cause === "timeout") return `timed out after ${timeoutMs} ms`;
      // The strict client's own messages begin with "upstream" already.
      if (fate.cause === "malformed") return `sent a malformed answer: ${fate.detail.replace(/^upstream /, "")}`;
      return `unreachable: ${fate.detail}`;
    case "request_error":
      return `answered HTTP ${fate.status} to POST ${path}`;
    case "rate_limited":
      return `answered HTTP 429 to POST ${path}`;
    case "invalid_answer":
      return `answered POST ${path} with a body that is not JSON`;
    default:
      return "";
  }
}

/** How the upstream-error metrics label a failed call: its status, or "timeout"/"connection"; null for an answer. */
export function failureLabel(fate: Fate): number | "timeout" | "connection" | null {
  switch (fate.kind) {
    case "engine_failure":
      return fate.status ?? (fate.cause === "timeout" ? "timeout" : "connection");
    case "request_error":
      return fate.status;
    case "rate_limited":
      return 429;
    default:
      return null;
  }
}

/** `retry-after-ms` or `retry-after` (seconds or an HTTP date), in ms; null if absent or unreadable. */
export function retryAfterMs(headers: HeaderReader, now = Date.now()): number | null {
  const ms = headers.get("retry-after-ms");
  if (ms && /^\d+(\.\d+)?$/.test(ms)) return Number(ms);
  const h = headers.get("retry-after");
  if (!h) return null;
  if (/^\d+(\.\d+)?$/.test(h)) return Number(h) * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

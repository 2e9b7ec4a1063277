// The result lines a batch line ends as (docs/CONTRACT.md §5): an answer in the output
// file, an error (a request's failed answer, or offpeak's own error with
// `response: null`) in the error file.
import { toMessage } from "../../anthropic/message";
import { IdStream } from "../../ids";
import type { AnswerShape } from "../types";

export interface LineResult {
  ok: boolean;
  line: string;
  /** The response body's usage, if any. */
  usage: unknown;
}

export interface BatchRequest {
  custom_id: string;
  body: Record<string, unknown>;
}

/** Ids for result lines and request ids: three per line, drawn from one stream. */
export const ids = new IdStream();

export function resultLine(customId: string, status: number | null, requestId: string | null, body: unknown, error: { code: string; message: string } | null): string {
  return (
    JSON.stringify({
      id: ids.next("batch_req_"),
      custom_id: customId,
      response: status === null ? null : { status_code: status, request_id: requestId, body },
      error,
    }) + "\n"
  );
}

/**
 * A result line around an upstream's JSON answer. The answer was parsed (so
 * it is valid JSON); when it is on one line it goes in as the upstream sent
 * it, saving a second serialisation per line. A multi-line (pretty-printed)
 * answer is re-serialised, since a JSONL line must not hold a newline.
 */
export function answerLine(customId: string, status: number, requestId: string | null, text: string, parsed: unknown): string {
  if (text.includes("\n") || text.includes("\r")) return resultLine(customId, status, requestId, parsed, null);
  return splicedLine(customId, status, requestId, text);
}

/** A result line around a body that is JSON text on one line already. */
export function splicedLine(customId: string, status: number, requestId: string | null, text: string): string {
  const head = JSON.stringify({ id: ids.next("batch_req_"), custom_id: customId, response: { status_code: status, request_id: requestId, body: 0 } });
  // head ends with `"body":0}}`: put the answer where the 0 is.
  return head.slice(0, -3) + text + "},\"error\":null}\n";
}

/**
 * The output line of a 2xx answer, in `shape` (../types.ts AnswerShape).
 * `text`: the answer as JSON text (an upstream's, or a built-in's serialised
 * answer); `body`: the answer parsed (undefined: parsed here only if a
 * message needs it; a built-in's made object when `text` is null).
 */
export function okLine(shape: AnswerShape | undefined, customId: string, status: number, requestId: string | null, text: string | null, body: unknown): string {
  if (shape === "message") return splicedLine(customId, status, requestId, JSON.stringify(toMessage(body === undefined ? JSON.parse(text!) : body, { id: ids.next("msg_") })));
  if (text === null) return resultLine(customId, status, requestId, body, null);
  return body === undefined ? splicedLine(customId, status, requestId, text) : answerLine(customId, status, requestId, text, body);
}

export function stoppedLine(customId: string, code: "batch_cancelled" | "batch_expired"): LineResult {
  // "completed", not "ran": after a crash, a request that was in flight when
  // the batch was stopped may have reached the model (docs/CONTRACT.md §5 allows it).
  const message = code === "batch_cancelled" ? "The batch was cancelled before this request completed." : "The batch expired before this request completed.";
  return { ok: false, line: resultLine(customId, null, null, null, { code, message }), usage: null };
}

/** What a line's last failed attempt left: the upstream's answer to it, or why none came. */
export type LastFailure = { status: number; requestId: string | null; body: unknown } | { error: string };

/** The line's result when its attempts end without an answer: the last failure, as the upstream answered it or as offpeak saw it. */
export function failedLine(customId: string, last: LastFailure | null): LineResult {
  if (last && "status" in last) return { ok: false, line: resultLine(customId, last.status, last.requestId, last.body, null), usage: null };
  const message = (last?.error ?? "upstream unreachable").slice(0, 500);
  return { ok: false, line: resultLine(customId, null, null, null, { code: "upstream_unreachable", message }), usage: null };
}

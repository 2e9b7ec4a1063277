// Runs one batch request and returns its result line. Built-in models answer
// synchronously in this Worker; upstream models are called over HTTP with
// retries (408/409/5xx/connection errors/timeouts: exponential backoff with
// full jitter, honouring retry-after, bounded by attempts and the deadline),
// behind the upstream's health gate (upstreamGate.ts): an outage or a 429
// makes lines wait, never fail.
import { ApiError } from "../../errors";
import { IdStream } from "../../ids";
import { Deadline } from "../../inference/upstream/deadline";
import { endpointKind, type EndpointKind } from "../../endpoints";
import { SerializedAnswer } from "../../endpoints/kind";
import type { PricedModel, RunTask } from "../types";
import { acquireSlot } from "./slots";
import { UNMEASURED, slotOutcome, type SlotOutcome } from "../../inference/admission/scheduler";
import { countUpstreamAttempt } from "../../metrics/worker";
import { epochOf, isDown, isUp, isWholeFailure, report429, reportAnswer, reportFailure, reportSuccess, retryAfterMs } from "../../inference/upstream/health";
import { READY, claim, enterUpstream, healthMemory, nextTick, ready, settled, tellSuspect } from "./upstreamGate";

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

const ids = new IdStream();

function resultLine(customId: string, status: number | null, requestId: string | null, body: unknown, error: { code: string; message: string } | null): string {
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
function upstreamLine(customId: string, status: number, requestId: string | null, text: string, parsed: unknown): string {
  if (text.includes("\n") || text.includes("\r")) return resultLine(customId, status, requestId, parsed, null);
  return splicedLine(customId, status, requestId, text);
}

/** A result line around a body that is JSON text on one line already. */
function splicedLine(customId: string, status: number, requestId: string | null, text: string): string {
  const head = JSON.stringify({ id: ids.next("batch_req_"), custom_id: customId, response: { status_code: status, request_id: requestId, body: 0 } });
  // head ends with `"body":0}}`: put the answer where the 0 is.
  return head.slice(0, -3) + text + "},\"error\":null}\n";
}

export function stoppedLine(customId: string, code: "batch_cancelled" | "batch_expired"): LineResult {
  // "completed", not "ran": after a crash, a request that was in flight when
  // the batch was stopped may have reached the model (SPEC §5 allows it).
  const message = code === "batch_cancelled" ? "The batch was cancelled before this request completed." : "The batch expired before this request completed.";
  return { ok: false, line: resultLine(customId, null, null, null, { code, message }), usage: null };
}

/** Built-in models: no I/O, so this runs inline in the line loop. The endpoint's module says how the built-in answers. */
export function runBuiltin(req: BatchRequest, _model: PricedModel, kind: EndpointKind): LineResult {
  const requestId = ids.next("req_");
  try {
    const body = kind.answer(req.body, ids, Math.floor(Date.now() / 1000));
    const line = body instanceof SerializedAnswer ? splicedLine(req.custom_id, 200, requestId, body.json) : resultLine(req.custom_id, 200, requestId, body, null);
    return { ok: true, line, usage: body.usage };
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { ok: false, line: resultLine(req.custom_id, e.status, requestId, e.body(), null), usage: null };
  }
}

/** SPEC §11: a 4xx other than 408/409/429 is the request's answer, recorded at once. */
const RETRYABLE = (status: number) => status === 408 || status === 409 || status === 429 || status >= 500;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sleeps `ms`, waking every 250 ms to see whether `stop()` has become true. */
async function sleepUnless(ms: number, stop: () => boolean): Promise<void> {
  const until = Date.now() + ms;
  for (let left = ms; left > 0 && !stop(); left = until - Date.now()) await sleep(Math.min(left, 250));
}

/**
 * What the shard is asked to do while a request waits to be retried: "stop"
 * (cancel/expire) ends retries and reports the last failure; "pause"
 * (SIGTERM checkpoint) ends retries without a result, so the line stays
 * undone and runs again after the restart.
 */
type StopState = "stop" | "pause" | null;

/** How a running shard is told to stop, set by messages to its Worker. */
export interface ShardControl {
  /** Set by a "stop" message: drain the rest as errors with this code. */
  stopCode: "batch_cancelled" | "batch_expired" | null;
  /** Set by a "checkpoint" message: pause after in-flight work. */
  pausing: boolean;
}

/**
 * Resolves with the result line, or null when a pause left the request
 * without a final answer.
 *
 * SPEC §11: an upstream outage is not the line's failure. Before each attempt
 * the line waits at the upstream's gate (up, no 429 pause, room in the batch
 * window). Attempts that fail while the upstream fails as a whole (it is down
 * now, or went down since the attempt began) do not count against
 * max_attempts; only answers about this request do (a 500 again and again: a
 * poison line). 429s never count: they slow the whole upstream instead.
 */
export async function runUpstream(req: BatchRequest, model: PricedModel, task: RunTask, control: ShardControl): Promise<LineResult | null> {
  const stopState = (): StopState => (control.stopCode !== null ? "stop" : control.pausing ? "pause" : null);
  const path = endpointKind(task.endpoint).path;
  const payload = JSON.stringify({ ...req.body, model: model.upstreamModel ?? model.id, stream: false });
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (model.apiKey) headers.authorization = `Bearer ${model.apiKey}`;
  const u = model.upstreamIdx;
  const mem = healthMemory();
  let last: { status: number; requestId: string | null; body: unknown } | null = null;
  let lastError = "";
  /** Failed attempts answered about this request (500, 408, 409…): they count against max_attempts. */
  let requestFailures = 0;
  /**
   * The health epoch at the start of each attempt that failed as a whole
   * (connection, timeout, 502/503/504). They count too, unless the upstream
   * has gone down since (the epoch moved on): then they were the outage's.
   */
  let wholeFailures: number[] = [];
  const counted = () => {
    if (!mem) return requestFailures + wholeFailures.length;
    const now = epochOf(mem, u);
    wholeFailures = wholeFailures.filter((e) => e === now);
    return requestFailures + wholeFailures.length;
  };
  for (let sent = 1; ; sent++) {
    // The upstream's gate (up, not paused, room in its window), then a
    // scheduler slot (one per attempt, not per request: during a backoff the
    // slot is free for others), then a last look at the gate.
    let release: ((outcome?: SlotOutcome) => void) | null = null;
    let leave: (() => void) | null = null;
    let stopped: { down: boolean } | null = null;
    while (!leave) {
      const gate = ready(u) && stopState() === null ? READY : await enterUpstream(u, () => stopState() !== null);
      if (!gate.go) {
        stopped = gate;
        break;
      }
      release = model.limited ? await acquireSlot(model.id) : null;
      leave = claim(u);
      if (leave) break;
      release?.();
      release = null;
      await nextTick();
    }
    if (stopped) {
      if (stopState() === "pause") return null;
      // Stopped while the upstream was away: no answer of this request to report.
      if (stopped.down || !last) return stoppedLine(req.custom_id, control.stopCode!);
      break;
    }
    const gateLeave = leave!;
    // The wait for a slot can be long: a line that has not been sent yet and
    // whose batch was stopped meanwhile is not sent at all.
    if (sent === 1 && stopState() !== null) {
      release?.();
      gateLeave();
      return control.stopCode ? stoppedLine(req.custom_id, control.stopCode) : null;
    }
    const epoch = mem ? epochOf(mem, u) : 0;
    let whole = false;
    /** What the slot's release tells the adaptive controller (inference/admission/scheduler.ts): a 2xx's time, a 429/503, or nothing. */
    let outcome: SlotOutcome = UNMEASURED;
    let wait: number | null = null;
    try {
      // A Deadline, not AbortSignal.timeout: that one's timer lives on for the whole timeout after the answer.
      const deadline = new Deadline(model.timeoutMs);
      let text: string;
      let res: Response;
      try {
        res = await fetch(model.baseUrl + path, { method: "POST", headers, body: payload, signal: deadline.signal });
        text = await res.text();
      } finally {
        deadline.clear();
      }
      let body: unknown;
      let isJson = true;
      try {
        body = JSON.parse(text);
      } catch {
        isJson = false;
        body = { error: { message: text.slice(0, 2000), type: "upstream_error", param: null, code: null } };
      }
      // SPEC §5 shows a request id on every response: ours when the upstream sends none.
      const requestId = res.headers.get("x-request-id") ?? ids.next("req_");
      countUpstreamAttempt(model.id, sent, res.ok ? null : res.status);
      outcome = slotOutcome(res.status);
      if (res.ok && isJson) {
        if (mem) reportSuccess(mem, u, true);
        return { ok: true, line: upstreamLine(req.custom_id, res.status, requestId, text, body), usage: (body as { usage?: unknown }).usage ?? null };
      }
      // A 2xx that is not JSON (a proxy's page, a misconfigured engine) is no
      // answer: an error line with response null (only 2xx answers go to the
      // output file, and a body of our making would pass for the upstream's),
      // not retried.
      if (res.ok) {
        if (mem) reportAnswer(mem, u);
        return {
          ok: false,
          line: resultLine(req.custom_id, null, null, null, {
            code: "upstream_invalid_response",
            message: `upstream answered HTTP ${res.status} with a body that is not JSON: ${text.slice(0, 200)}`,
          }),
          usage: null,
        };
      }
      last = { status: res.status, requestId, body };
      if (res.status === 429) {
        // The upstream's pace, not this request's fault: the gate holds every
        // line of the upstream until retry-after, in a smaller window.
        if (mem) report429(mem, u, retryAfterMs(res.headers));
        continue;
      }
      if (isWholeFailure(res.status)) {
        whole = true;
        if (mem && reportFailure(mem, u)) tellSuspect(u, `HTTP ${res.status} from POST ${path}`);
      } else if (mem) reportAnswer(mem, u);
      if (!RETRYABLE(res.status)) break;
      wait = retryAfterMs(res.headers);
    } catch (e) {
      const timedOut = (e as Error).name === "TimeoutError";
      countUpstreamAttempt(model.id, sent, timedOut ? "timeout" : "connection");
      last = null;
      lastError = timedOut ? `upstream timed out after ${model.timeoutMs} ms` : `upstream unreachable: ${(e as Error).message}`;
      whole = true;
      if (mem && reportFailure(mem, u)) tellSuspect(u, lastError);
    } finally {
      release?.(outcome);
      gateLeave();
    }
    if (whole) wholeFailures.push(epoch);
    else requestFailures++;
    // Failures in a row made the upstream suspect: its probe says whether
    // this was an outage (forgiven) or these requests' own failures.
    if (whole) await settled(u, () => stopState() !== null);
    const n = counted();
    // Down: the gate waits for the upstream's return.
    if (mem && whole && isDown(mem, u)) continue;
    if (n >= task.maxAttempts) break;
    const state = stopState();
    if (state === "pause") return null;
    if (state === "stop") break;
    // Full jitter: uniform in [0, base·2^(n-1)], at least what retry-after asks.
    const backoff = Math.random() * task.retryBaseMs * 2 ** (n - 1);
    const delay = Math.min(Math.max(wait ?? 0, backoff), 60_000);
    if (Date.now() + delay >= task.deadline) break;
    // A cancel or a shutdown must not wait out a long retry-after; an outage
    // that begins meanwhile sends the line to the gate at once.
    await sleepUnless(delay, () => stopState() !== null || (mem !== null && !isUp(mem, u)));
    const after = stopState();
    if (after === "pause") return null;
    if (after === "stop") break;
  }
  if (last) return { ok: false, line: resultLine(req.custom_id, last.status, last.requestId, last.body, null), usage: null };
  return { ok: false, line: resultLine(req.custom_id, null, null, null, { code: "upstream_unreachable", message: lastError.slice(0, 500) }), usage: null };
}

// Runs one batch request and returns its result line. Built-in models answer
// synchronously in this Worker; upstream models are called over the one
// transport (inference/upstream/transport.ts) in steps (./lineSteps.ts):
// wait at the upstream's gate → attempt → judge → back off, again until an
// answer, a final failure, the attempts or the deadline end it. An outage or
// a 429 makes lines wait, never fail (docs/CONTRACT.md §11).
import { ApiError } from "../../errors";
import type { EndpointKind } from "../../endpoints";
import { endpointKind } from "../../endpoints";
import { SerializedAnswer } from "../../endpoints/kind";
import type { AnswerShape, PricedModel, RunTask } from "../types";
import { Attempts, attempt, backOff, chooseReplica, done, judge, lineCall, passGate, stopStateOf, type ShardControl } from "./lineSteps";
import { failedLine, ids, okLine, resultLine, stoppedLine, type BatchRequest, type LastFailure, type LineResult } from "./resultLines";
import { healthMemory } from "./upstreamGate";
import { acquireSlot, type SlotRelease } from "./slots";

export { stoppedLine, type BatchRequest, type LineResult, type ShardControl };

/** Built-in models: no I/O, so this runs inline in the line loop. The endpoint's module says how the built-in answers; `shape`, how the answer is written. */
export function runBuiltin(req: BatchRequest, _model: PricedModel, kind: EndpointKind, shape?: AnswerShape): LineResult {
  const requestId = ids.next("req_");
  try {
    const body = kind.answer(req.body, ids, Math.floor(Date.now() / 1000));
    const line = body instanceof SerializedAnswer ? okLine(shape, req.custom_id, 200, requestId, body.json, undefined) : okLine(shape, req.custom_id, 200, requestId, null, body);
    return { ok: true, line, usage: body.usage };
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { ok: false, line: resultLine(req.custom_id, e.status, requestId, e.body(), null), usage: null };
  }
}

/** Resolves with the result line, or null when a pause left the request without a final answer. */
/** `replica`: the one the prefix window chose for the line's first attempt (-1: the dispatch chooses); `key`: its prefix key, when the window has it. */
export async function runUpstream(req: BatchRequest, model: PricedModel, task: RunTask, control: ShardControl, replica = -1, key: number | null = null): Promise<LineResult | null> {
  const call = lineCall(req, model, endpointKind(task.endpoint).path, key, task.answerShape);
  const attempts = new Attempts(healthMemory(), model.upstreamIdx);
  let last: LastFailure | null = null;
  let avoid = -1;
  for (let sent = 1; ; sent++) {
    const pass = await passGate(model, control);
    if (pass.stopped) {
      if (stopStateOf(control) === "pause") return null;
      // Stopped while the upstream was away, or before any answer: no answer of this request to report.
      if (pass.down || !last || !("status" in last)) return stoppedLine(req.custom_id, control.stopCode!);
      return failedLine(req.custom_id, last);
    }
    // The wait for a slot can be long: a line not sent yet whose batch was stopped meanwhile is not sent at all.
    if (sent === 1 && stopStateOf(control) !== null) {
      done(pass);
      return control.stopCode ? stoppedLine(req.custom_id, control.stopCode) : null;
    }
    const epoch = attempts.epoch();
    const on = chooseReplica(call, avoid, sent === 1 ? replica : -1);
    const verdict = judge(req, await attempt(call, on), model, call, sent);
    done(pass, verdict.outcome);
    if (verdict.kind === "done") return verdict.result;
    last = verdict.last;
    // docs/CONTRACT.md §21: a line whose replica failed goes to another on its next attempt.
    avoid = verdict.kind === "retry" && verdict.whole && on ? on.idx : -1;
    if (verdict.kind === "rate_limited") continue;
    attempts.failed(verdict.whole, epoch);
    const next = await backOff(verdict, attempts, model, task, control);
    if (next === "pause") return null;
    if (next === "give_up") return failedLine(req.custom_id, last);
    if (next === "expire") return stoppedLine(req.custom_id, "batch_expired");
  }
}

/** One line that waits (an upstream, or a built-in with simulated latency): its result, or null when a pause left it undone. */
export async function runLine(req: BatchRequest, model: PricedModel, task: RunTask, control: ShardControl, replica: number, key: number | null): Promise<LineResult | null> {
  if (model.kind === "upstream") return runUpstream(req, model, task, control, replica, key);
  // A built-in with simulated latency occupies a scheduler slot like an upstream would.
  let release: SlotRelease | null = null;
  if (model.limited) {
    // Paused or stopped before its slot (the asks already waiting were cancelled; this line may
    // come after, from the wait for room under the shard's bound), or its wait cancelled: paused,
    // the line stays undone; stopped, it is not run.
    const stopped = () => (control.stopCode ? stoppedLine(req.custom_id, control.stopCode) : null);
    if (stopStateOf(control) !== null) return stopped();
    if (!(release = await acquireSlot(model.id))) return stopped();
  }
  try {
    await new Promise((r) => setTimeout(r, model.latencyMs));
    return runBuiltin(req, model, endpointKind(task.endpoint), task.answerShape);
  } finally {
    release?.();
  }
}

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
import type { PricedModel, RunTask } from "../types";
import { Attempts, attempt, backOff, chooseReplica, done, judge, lineCall, passGate, stopStateOf, type ShardControl } from "./lineSteps";
import { failedLine, ids, resultLine, splicedLine, stoppedLine, type BatchRequest, type LastFailure, type LineResult } from "./resultLines";
import { healthMemory } from "./upstreamGate";

export { stoppedLine, type BatchRequest, type LineResult, type ShardControl };

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

/** Resolves with the result line, or null when a pause left the request without a final answer. */
export async function runUpstream(req: BatchRequest, model: PricedModel, task: RunTask, control: ShardControl): Promise<LineResult | null> {
  const call = lineCall(req, model, endpointKind(task.endpoint).path);
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
    const replica = chooseReplica(call, avoid);
    const verdict = judge(req, await attempt(call, replica), model, call, sent);
    done(pass, verdict.outcome);
    if (verdict.kind === "done") return verdict.result;
    last = verdict.last;
    // docs/CONTRACT.md §21: a line whose replica failed goes to another on its next attempt.
    avoid = verdict.kind === "retry" && verdict.whole && replica ? replica.idx : -1;
    if (verdict.kind === "rate_limited") continue;
    attempts.failed(verdict.whole, epoch);
    const next = await backOff(verdict, attempts, model, task, control);
    if (next === "pause") return null;
    if (next === "give_up") return failedLine(req.custom_id, last);
  }
}

// An interactive request's call to its model's upstream, on the main
// thread: over the one transport (./transport.ts), judged by the one
// classifier (./fate.ts), told to the upstream's health and the metrics.
// (Front threads, src/http/front, make the same call and tell the main
// thread what happened.)
import { ApiError } from "../../errors";
import { countUpstreamError, countUpstreamRequest } from "../../metrics";
import type { EndpointPath } from "../../endpoints/kind";
import type { ModelEntry } from "../registry";
import type { UpstreamAnswer } from "./answer";
import { Deadline } from "./deadline";
import { CallFailure, classify, failureLabel, type Fate } from "./fate";
import { enter } from "../replicas/cells";
import { leftReplica, pickReplica, prefixKey, type ReplicaView } from "../replicas/pick";
import type { ReplicaSets } from "../replicas/set";
import { attachDeadline, timeoutError } from "./interactive";
import { postJson, type UpstreamTarget } from "./transport";

export interface UpstreamCall {
  model: ModelEntry;
  /** The endpoint module's path (under the upstream's base_url). */
  path: EndpointPath;
  body: Record<string, unknown>;
  /**
   * The text `body` was parsed from, unchanged since: sent as is when the
   * model's name needs no mapping (spreading and stringifying the body again
   * was ≈2% of the main thread in the chat pass-through).
   */
  raw?: string;
  /** The client's signal, aborted when it goes away; read only when needed (see Deadline). */
  clientSignal: () => AbortSignal;
}

export async function callUpstream({ model, path, body, raw, clientSignal }: UpstreamCall): Promise<UpstreamAnswer> {
  const health = model.health;
  const u = model.upstreamIdx;
  throwIfDown(model);
  const deadline = new Deadline(model.timeoutMs, clientSignal);
  const upstreamModel = model.upstreamModel ?? model.id;
  const payload = raw !== undefined && body.model === upstreamModel ? raw : JSON.stringify({ ...body, model: upstreamModel });
  countUpstreamRequest(model.id);
  const on = replicaFor(model, upstreamModel, body);
  const startedAt = performance.now();
  try {
    const res = await postJson(on?.target ?? model, path, payload, deadline);
    attachDeadline(res, model, deadline);
    if (!res.ok) countUpstreamError(model.id, res.status);
    const fate = classify(res);
    if (replicaEnded(on, fate, startedAt)) health?.noteFate(u, fate, path, model.timeoutMs);
    return res;
  } catch (e) {
    const failure = new CallFailure(e, deadline.timedOut, deadline.clientGone());
    deadline.clear();
    // The client left: rethrow the abort (answered 499, not counted as an upstream fault).
    if (failure.clientGone) {
      replicaEnded(on, { kind: "cancelled" }, startedAt);
      throw e;
    }
    const fate = classify(failure);
    countUpstreamError(model.id, failureLabel(fate) ?? "connection");
    if (replicaEnded(on, fate, startedAt)) health?.noteFate(u, fate, path, model.timeoutMs);
    if (failure.timedOut) throw timeoutError(model);
    // This failure may be the one that turned the upstream down.
    if (health?.isDown(u)) throw unavailable(model, health.retryAfterSeconds(u));
    throw new ApiError("upstream_error", `Upstream ${model.upstreamName} is unreachable`);
  }
}

interface OnReplica {
  sets: ReplicaSets;
  upstream: string;
  replica: ReplicaView;
  target: UpstreamTarget;
}

/**
 * The replica this request goes to (docs/CONTRACT.md §21): by the prompt's
 * prefix, bounded by load (../replicas/pick.ts); null for an upstream
 * without replica sets (a registry built alone, in tests).
 */
function replicaFor(model: ModelEntry, upstreamModel: string, body: Record<string, unknown>): OnReplica | null {
  const sets = model.replicaSets;
  if (!sets || !model.upstream) return null;
  const views = sets.views(model.upstream);
  // One replica: no prefix to hash.
  const replica = views.length === 1 ? views[0]! : pickReplica(views, sets.cells, prefixKey(upstreamModel, body), -1, sets.times);
  if (!replica) throw new ApiError("upstream_unavailable", `Upstream ${model.upstreamName} has no replica taking requests (all drained or removed).`, { headers: { "retry-after": "1" } });
  enter(sets.cells, replica.idx);
  return { sets, upstream: model.upstream, replica, target: { baseUrl: replica.baseUrl, apiKey: model.apiKey, ownClient: replica.ownClient } };
}

/**
 * The request left its replica (its answer's headers came, or it failed).
 * The in-flight count ends at the headers: a streamed answer runs on a
 * while, but engines send a plain answer's headers with its body. True when
 * the upstream as a whole is to hear the fate: always but for a failure
 * that another replica would have taken instead.
 */
function replicaEnded(on: OnReplica | null, fate: Fate, startedAt: number): boolean {
  if (!on) return true;
  const left = leftReplica(on.sets.views(on.upstream), on.sets.cells, on.replica.idx, fate.kind === "engine_failure", performance.now() - startedAt, fate.kind === "answer");
  if (left.opened) on.sets.opened(on.replica.idx);
  return left.tellUpstream;
}

/** docs/CONTRACT.md §11: while the upstream is down, answer at once instead of waiting out a connection timeout; retry-after says when the next probe runs. */
export function throwIfDown(model: ModelEntry): void {
  const health = model.health;
  if (health?.isDown(model.upstreamIdx)) throw unavailable(model, health.retryAfterSeconds(model.upstreamIdx));
}

export const unavailable = (model: ModelEntry, retryAfter: number) =>
  new ApiError("upstream_unavailable", `Upstream ${model.upstreamName} is unavailable (down since its last failures); retry after ${retryAfter} s.`, {
    headers: { "retry-after": String(retryAfter) },
  });


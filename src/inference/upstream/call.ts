// An interactive request's trip to its model's upstream, on the main
// thread: the upstream's health first (down: answered at once), the replica
// it goes to (docs/CONTRACT.md §21), then what became of the call, told to
// the replica's counts, the upstream's health and the metrics. The call
// itself is ./pass.ts's callTarget, over the one transport (./transport.ts),
// judged by the one classifier (./fate.ts); a front thread makes it there
// and tells the main thread what happened (src/http/front), which tells
// the request's leg here.
import { ApiError } from "../../errors";
import { countUpstreamError, countUpstreamRequest } from "../../metrics";
import type { EndpointPath } from "../../endpoints/kind";
import type { ModelEntry } from "../registry";
import type { UpstreamAnswer } from "./answer";
import { CANCELLED, classify, failureLabel, type CallFailure, type Fate } from "./fate";
import { enter } from "../replicas/cells";
import { leftReplica, pickReplica, pickUntried, prefixKey, type ReplicaView } from "../replicas/pick";
import type { ReplicaSets } from "../replicas/set";
import { timeoutError } from "./interactive";
import { callTarget, type CallPort, type CallTarget } from "./pass";
import type { UpstreamTarget } from "./transport";

export interface UpstreamCall {
  model: ModelEntry;
  /** The endpoint module's path (under the upstream's base_url). */
  path: EndpointPath;
  body: Record<string, unknown>;
  /**
   * The text `body` was parsed from, unchanged since: sent as is when the
   * model's name needs no mapping.
   */
  raw?: string;
  /** The client's signal, aborted when it goes away; read only when needed (see Deadline). */
  clientSignal: () => AbortSignal;
}

/** One call to the model's upstream, its answer's head returned (for the callers that read the answer themselves: embeddings, chat sessions, token counts). */
export function callUpstream({ model, path, body, raw, clientSignal }: UpstreamCall): Promise<UpstreamAnswer> {
  const leg = new UpstreamLeg(model, path, body);
  return callTarget(leg, leg, path, body, raw, clientSignal);
}

/**
 * One request's call to its model's upstream, as the main thread keeps it:
 * made, it has checked the upstream is up, counted the request and chosen
 * the replica (`target`); then exactly one of answered, failed or cancelled
 * says how it left the replica (later ones are ignored), unless elsewhere
 * moved it to another replica first.
 */
export class UpstreamLeg implements CallPort, CallTarget {
  target: UpstreamTarget;
  readonly upstreamModel: string;
  /** The upstream has several replicas taking work (the prompt's prefix chose among them). */
  readonly spread: boolean;
  private on: OnReplica | null;
  private startedAt: number;
  private left = false;
  /** The replicas whose connection refused this request (elsewhere); null until one did. */
  private tried: number[] | null = null;

  /** `prompt`: the body, whose prompt's prefix chooses among several replicas, or that prefix's key (a front thread's; see replicaFor). */
  constructor(
    readonly upstream: ModelEntry,
    private readonly path: EndpointPath,
    prompt: Prompt,
  ) {
    throwIfDown(upstream);
    this.upstreamModel = upstream.upstreamModel ?? upstream.id;
    countUpstreamRequest(upstream.id);
    this.on = replicaFor(upstream, this.upstreamModel, prompt);
    this.spread = this.on?.spread ?? false;
    this.target = this.on?.target ?? upstream;
    this.startedAt = performance.now();
  }

  answered(status: number, fate: Fate): void {
    const model = this.upstream;
    if (status < 200 || status > 299) countUpstreamError(model.id, status);
    if (this.leave(fate)) model.health?.noteFate(model.upstreamIdx, fate, this.path, model.timeoutMs);
  }

  failed(failure: CallFailure): never {
    throw this.failedWith(classify(failure), failure.timedOut);
  }

  /** A failed call as `fate` (and whether its deadline ended it): counted, told; the error to answer. */
  failedWith(fate: Fate, timedOut: boolean): ApiError {
    const model = this.upstream;
    const health = model.health;
    const u = model.upstreamIdx;
    countUpstreamError(model.id, failureLabel(fate) ?? "connection");
    if (this.leave(fate)) health?.noteFate(u, fate, this.path, model.timeoutMs);
    if (timedOut) return timeoutError(model);
    // This failure may be the one that turned the upstream down.
    if (health?.isDown(u)) return unavailable(model, health.retryAfterSeconds(u));
    return new ApiError("upstream_error", `Upstream ${model.upstreamName} is unreachable`);
  }

  cancelled(): void {
    this.leave(CANCELLED);
  }

  elsewhere(failure: CallFailure): UpstreamTarget | null {
    return this.elsewhereAfter(classify(failure));
  }

  /**
   * The call never reached its replica (`fate`: refused; ./fate.ts
   * neverSent): another replica of the upstream whose breaker is closed and
   * that this request has not tried, entered; the failure is counted on the
   * one left, as any failure is (its breaker opens after a few in a row).
   * Null when there is none: nothing is counted then, and failed() says
   * what to answer, as with one engine.
   */
  elsewhereAfter(fate: Fate): UpstreamTarget | null {
    const on = this.on;
    if (!on || this.left) return null;
    const tried = (this.tried ??= []);
    tried.push(on.replica.idx);
    const next = pickUntried(on.sets.views(on.upstream), on.sets.cells, on.key, tried, on.sets.times);
    if (!next) return null;
    const model = this.upstream;
    countUpstreamError(model.id, failureLabel(fate) ?? "connection");
    if (this.leave(fate)) model.health?.noteFate(model.upstreamIdx, fate, this.path, model.timeoutMs);
    enter(on.sets.cells, next.idx);
    this.on = { ...on, replica: next, target: targetOf(model, next) };
    this.target = this.on.target;
    this.left = false;
    this.startedAt = performance.now();
    return this.target;
  }

  /** True when the upstream as a whole is to hear the fate (see replicaEnded); false if the leg was left already. */
  private leave(fate: Fate): boolean {
    if (this.left) return false;
    this.left = true;
    return replicaEnded(this.on, fate, this.startedAt);
  }
}

/** Whether the model's upstream has several replicas taking work (so a request's prompt chooses among them). */
export function spreadsOver(model: ModelEntry): boolean {
  const views = model.upstream !== null ? model.replicaSets?.views(model.upstream) : undefined;
  return views !== undefined && views.length > 1;
}

/** What chooses the replica: a request body (its prompt's prefix is hashed here), or the key a front thread hashed from it. */
export type Prompt = Record<string, unknown> | number;

interface OnReplica {
  sets: ReplicaSets;
  upstream: string;
  /** The prompt's prefix key (0: none): it ranks the replicas again if this one refuses. */
  key: number;
  replica: ReplicaView;
  target: UpstreamTarget;
  spread: boolean;
}

/**
 * The replica this request goes to (docs/CONTRACT.md §21): by the prompt's
 * prefix, bounded by load (../replicas/pick.ts); null for an upstream
 * without replica sets (a registry built alone, in tests). A key of 0 (no
 * prompt text): the least loaded replica takes it.
 */
function replicaFor(model: ModelEntry, upstreamModel: string, prompt: Prompt): OnReplica | null {
  const sets = model.replicaSets;
  if (!sets || !model.upstream) return null;
  const views = sets.views(model.upstream);
  // One replica: no prefix to hash.
  const key = views.length === 1 ? 0 : typeof prompt === "number" ? prompt : prefixKey(upstreamModel, prompt);
  const replica = views.length === 1 ? views[0]! : pickReplica(views, sets.cells, key, -1, sets.times);
  if (!replica) throw new ApiError("upstream_unavailable", `Upstream ${model.upstreamName} has no replica taking requests (all drained or removed).`, { headers: { "retry-after": "1" } });
  enter(sets.cells, replica.idx);
  return { sets, upstream: model.upstream, key, replica, target: targetOf(model, replica), spread: views.length > 1 };
}

const targetOf = (model: ModelEntry, replica: ReplicaView): UpstreamTarget => ({ baseUrl: replica.baseUrl, apiKey: model.apiKey, ownClient: replica.ownClient });

/**
 * The request left its replica (its answer's headers came, or it failed).
 * The in-flight count ends at the headers: a streamed answer runs on a
 * while, but engines send a plain answer's headers with its body. True when
 * the upstream as a whole is to hear the fate: always but for a failure
 * that another replica would have taken instead.
 */
function replicaEnded(on: OnReplica | null, fate: Fate, startedAt: number): boolean {
  if (!on) return true;
  const left = leftReplica(on.sets.views(on.upstream), on.sets.cells, on.replica.idx, fate, performance.now() - startedAt);
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

// The steps of one batch line's upstream request (execute.ts runs them in a
// loop): wait at the gate → attempt → judge → back off.
//
// docs/CONTRACT.md §11: an upstream outage is not the line's failure. Before each attempt
// the line waits at the upstream's gate (up, no 429 pause, room in the batch
// window) and for a scheduler slot. Attempts that fail while the upstream
// fails as a whole (it is down now, or went down since the attempt began) do
// not count against max_attempts; only answers about this request do (a 500
// again and again: a poison line). 429s never count: they slow the whole
// upstream instead.
import { UNMEASURED, slotOutcome, type SlotOutcome } from "../../inference/admission/slotCells";
import type { UpstreamAnswer } from "../../inference/upstream/answer";
import { Deadline } from "../../inference/upstream/deadline";
import { CallFailure, classify, describe, failureLabel, type Fate } from "../../inference/upstream/fate";
import { enter, isOpen } from "../../inference/replicas/cells";
import { leftReplica, pickReplica, prefixKey, type ReplicaView } from "../../inference/replicas/pick";
import { epochOf, isDown, isUp, reportFate, type HealthMemory } from "../../inference/upstream/health";
import { postJson, type UpstreamTarget } from "../../inference/upstream/transport";
import { countUpstreamAttempt } from "../../metrics/worker";
import type { AnswerShape, PricedModel, RunTask } from "../types";
import { ids, okLine, resultLine, type BatchRequest, type LastFailure, type LineResult } from "./resultLines";
import { acquireSlot, type SlotRelease } from "./slots";
import { READY, claim, enterUpstream, healthMemory, nextTick, ready, settled, tellSuspect } from "./upstreamGate";
import { replicaCells, replicaTimes, replicasOf } from "./replicas";

/** How a running shard is told to stop, set by messages to its Worker. */
export interface ShardControl {
  /** Set by a "stop" message: drain the rest as errors with this code. */
  stopCode: "batch_cancelled" | "batch_expired" | null;
  /** Set by a "checkpoint" message: pause after in-flight work. */
  pausing: boolean;
}

/**
 * What the shard is asked to do while a request waits: "stop" (cancel,
 * expire) ends retries and reports the last failure; "pause" (SIGTERM
 * checkpoint) ends retries without a result, so the line stays undone and
 * runs again after the restart.
 */
export type StopState = "stop" | "pause" | null;

export const stopStateOf = (control: ShardControl): StopState => (control.stopCode !== null ? "stop" : control.pausing ? "pause" : null);

// ── 1. wait at the gate ────────────────────────────────────────────────

/** Past the gate: a place in the upstream's window and, on a limited model, a scheduler slot. Give both back with `done`. */
export interface Pass {
  readonly stopped: false;
  readonly release: ((outcome?: SlotOutcome) => void) | null;
  readonly leave: () => void;
}

/** The shard was stopped or paused while the line waited; `down`: the upstream is down now. */
export interface Stopped {
  readonly stopped: true;
  readonly down: boolean;
}

/** Gives back what a pass holds; `outcome` tells the adaptive controller what the attempt saw. */
export function done(pass: Pass, outcome?: SlotOutcome): void {
  pass.release?.(outcome);
  pass.leave();
}

/**
 * Waits until the line may be sent: the upstream's gate (up, not paused,
 * room in its window), then a scheduler slot (one per attempt, not per
 * request: during a backoff the slot is free for others), then a last look
 * at the gate (the slot's wait can be long: a 429 may have paused the
 * upstream meanwhile). Or until the shard is stopped.
 */
export async function passGate(model: PricedModel, control: ShardControl): Promise<Pass | Stopped> {
  const u = model.upstreamIdx;
  const stopped = () => stopStateOf(control) !== null;
  for (;;) {
    const gate = ready(u) && !stopped() ? READY : await enterUpstream(u, stopped);
    if (!gate.go) return { stopped: true, down: gate.down };
    let release: SlotRelease | null = null;
    if (model.limited) {
      // A pause or stop cancels the asks waiting (slots.ts cancelAsks); one made after it is not made.
      if (stopped() || !(release = await acquireSlot(model.id))) return { stopped: true, down: false };
    }
    const leave = claim(u);
    if (leave) return { stopped: false, release, leave };
    release?.();
    await nextTick();
  }
}

// ── 2. attempt ─────────────────────────────────────────────────────────

/** One line's request, built once for all its attempts. */
export interface LineCall {
  target: UpstreamTarget;
  /** The endpoint's path under the upstream's base_url. */
  path: string;
  payload: string;
  timeoutMs: number;
  /** The prompt's prefix key (inference/replicas/pick.ts), once a choice among replicas needed it (or the shard's prefix window gave it); null before. */
  key: number | null;
  /** The request body, for the prefix key. */
  body: Record<string, unknown>;
  upstreamModel: string;
  /** The upstream's name: its replica set. */
  upstream: string | null;
  /** How a 2xx answer is written (../types.ts). */
  shape: AnswerShape | undefined;
}

export function lineCall(req: BatchRequest, model: PricedModel, path: string, key: number | null = null, shape?: AnswerShape): LineCall {
  const upstreamModel = model.upstreamModel ?? model.id;
  // docs/CONTRACT.md §21 batch_priority: the engine lets interactive requests overtake batch lines it holds.
  const body = model.batchPriority === null || model.batchPriority === undefined ? { ...req.body, model: upstreamModel, stream: false } : { ...req.body, model: upstreamModel, stream: false, priority: model.batchPriority };
  return { target: model, path, payload: JSON.stringify(body), timeoutMs: model.timeoutMs, key, body: req.body, upstreamModel, upstream: model.upstream ?? null, shape };
}

/**
 * The replica for an attempt (null: the model's own base_url, as for a
 * Worker without replica sets). `avoid`: the one the last attempt failed
 * on; `preferred`: the one the shard's prefix window chose, taken while it
 * is in the set and its breaker closed.
 */
export function chooseReplica(call: LineCall, avoid: number, preferred = -1): ReplicaView | null {
  const cells = replicaCells();
  if (!cells) return null;
  const views = replicasOf(call.upstream);
  if (preferred >= 0) {
    const v = views.find((x) => x.idx === preferred);
    if (v && !isOpen(cells, v.idx)) return v;
  }
  // One replica (most upstreams): no prefix to hash, a million lines over.
  if (views.length <= 1) return views[0] ?? null;
  call.key ??= prefixKey(call.upstreamModel, call.body);
  return pickReplica(views, cells, call.key, avoid, replicaTimes());
}

/** What one attempt got: the answer and its whole body, or the failure it threw (sending or reading). */
export type Tried = ({ res: UpstreamAnswer; text: string } | { res: null; failure: CallFailure }) & { replica?: ReplicaView | null; startedAt?: number };

/** Sends the request once over the one transport (to `replica`, when given) and reads the whole answer, within the model's timeout. */
export async function attempt(call: LineCall, replica: ReplicaView | null = null): Promise<Tried> {
  // A Deadline, not AbortSignal.timeout: that one's timer lives on for the whole timeout after the answer.
  const deadline = new Deadline(call.timeoutMs);
  const cells = replicaCells();
  const target = replica ? { baseUrl: replica.baseUrl, apiKey: call.target.apiKey, ownClient: replica.ownClient } : call.target;
  if (replica && cells) enter(cells, replica.idx);
  const startedAt = performance.now();
  try {
    const res = await postJson(target, call.path, call.payload, deadline);
    return { res, text: await res.text(), replica, startedAt };
  } catch (e) {
    return { res: null, failure: new CallFailure(e, deadline.timedOut), replica, startedAt };
  } finally {
    deadline.clear();
  }
}

/**
 * Tells the replica's cells how its attempt ended, and whether the upstream
 * as a whole is to hear of a failure: only when no other replica would take
 * the line (docs/CONTRACT.md §21: one replica of N dying is not an outage).
 */
function replicaEnded(tried: Tried, fate: Fate, upstream: string | null): boolean {
  const replica = tried.replica;
  const cells = replicaCells();
  if (!replica || !cells) return true;
  // An opened breaker needs no message: the main thread's sweep probes open replicas.
  return leftReplica(replicasOf(upstream), cells, replica.idx, fate, performance.now() - (tried.startedAt ?? 0)).tellUpstream;
}

// ── 3. judge ───────────────────────────────────────────────────────────

export type Verdict =
  /** The line's result: an answer, or a failure that sending again cannot change. */
  | { kind: "done"; result: LineResult; outcome: SlotOutcome }
  /** 429: back to the gate, which holds the line until the upstream's retry-after. Not counted. */
  | { kind: "rate_limited"; last: LastFailure; outcome: SlotOutcome }
  /** Sent again after a backoff (at least `waitMs`: the answer's retry-after). `whole`: the engine failed as a whole. */
  | { kind: "retry"; whole: boolean; waitMs: number | null; last: LastFailure; outcome: SlotOutcome };

/**
 * Judges an attempt by the one classifier (inference/upstream/fate.ts),
 * reports its fate to the upstream's health (a report that makes it
 * suspect has it probed) and counts it; says what becomes of the line.
 */
export function judge(req: BatchRequest, tried: Tried, model: PricedModel, call: LineCall, sent: number): Verdict {
  const mem = healthMemory();
  const u = model.upstreamIdx;
  if (!tried.res) {
    const fate = classify(tried.failure);
    countUpstreamAttempt(model.id, sent, failureLabel(fate) ?? "connection");
    const what = describe(fate, call.path, call.timeoutMs);
    if (replicaEnded(tried, fate, call.upstream) && mem && reportFate(mem, u, fate, true)) tellSuspect(u, what);
    return { kind: "retry", whole: true, waitMs: null, last: { error: `upstream ${what}` }, outcome: UNMEASURED };
  }
  const { res, text } = tried;
  let body: unknown;
  let isJson = true;
  try {
    body = JSON.parse(text);
  } catch {
    isJson = false;
    body = { error: { message: text.slice(0, 2000), type: "upstream_error", param: null, code: null } };
  }
  const fate = classify(res, isJson);
  // docs/CONTRACT.md §5 shows a request id on every response: ours when the upstream sends none.
  const requestId = res.headers.get("x-request-id") ?? ids.next("req_");
  countUpstreamAttempt(model.id, sent, failureLabel(fate));
  const outcome = slotOutcome(res.status);
  if (replicaEnded(tried, fate, call.upstream) && mem && reportFate(mem, u, fate, true)) tellSuspect(u, describe(fate, call.path, call.timeoutMs));
  switch (fate.kind) {
    case "answer":
      return { kind: "done", result: { ok: true, line: okLine(call.shape, req.custom_id, res.status, requestId, text, body), usage: (body as { usage?: unknown }).usage ?? null }, outcome };
    case "invalid_answer": {
      // No answer: an error line with response null (only 2xx answers go to
      // the output file, and a body of our making would pass for the
      // upstream's), not retried.
      const error = { code: "upstream_invalid_response", message: `upstream answered HTTP ${res.status} with a body that is not JSON: ${text.slice(0, 200)}` };
      return { kind: "done", result: { ok: false, line: resultLine(req.custom_id, null, null, null, error), usage: null }, outcome };
    }
    case "rate_limited":
      return { kind: "rate_limited", last: { status: res.status, requestId, body }, outcome };
    case "engine_failure":
      return { kind: "retry", whole: true, waitMs: fate.retryAfterMs, last: { status: res.status, requestId, body }, outcome };
    case "request_error":
      // docs/CONTRACT.md §11: a 4xx other than 408/409/429 is the request's answer, recorded at once.
      if (!fate.retry) return { kind: "done", result: { ok: false, line: resultLine(req.custom_id, res.status, requestId, body, null), usage: null }, outcome };
      return { kind: "retry", whole: false, waitMs: fate.retryAfterMs, last: { status: res.status, requestId, body }, outcome };
    default:
      throw new Error(`unexpected fate ${fate.kind} of an answer`);
  }
}

// ── 4. back off ────────────────────────────────────────────────────────

/**
 * A line's failed attempts as they count against max_attempts: every one
 * about the request, and each one that failed as a whole unless the
 * upstream has gone down since it began (the health epoch moved on: it was
 * the outage's).
 */
export class Attempts {
  private requestFailures = 0;
  /** The health epoch at the start of each attempt that failed as a whole. */
  private wholeFailures: number[] = [];

  constructor(
    private readonly mem: HealthMemory | null,
    private readonly u: number,
  ) {}

  /** The epoch an attempt starting now begins in. */
  epoch(): number {
    return this.mem ? epochOf(this.mem, this.u) : 0;
  }

  failed(whole: boolean, epoch: number): void {
    if (whole) this.wholeFailures.push(epoch);
    else this.requestFailures++;
  }

  counted(): number {
    if (this.mem) {
      const now = epochOf(this.mem, this.u);
      this.wholeFailures = this.wholeFailures.filter((e) => e === now);
    }
    return this.requestFailures + this.wholeFailures.length;
  }
}

/** Time, for the backoff: real, or a test's. */
export interface Clock {
  now(): number;
  random(): number;
  sleep(ms: number): Promise<void>;
}

export const realClock: Clock = { now: Date.now, random: Math.random, sleep: (ms) => new Promise((r) => setTimeout(r, ms)) };

/**
 * "again": to the gate for the next attempt; "give_up": the line ends with
 * its last failure; "expire": the batch's deadline comes first while the
 * engine fails as a whole (an outage the health has not called yet), so the
 * line ends batch_expired, not with that failure (docs/CONTRACT.md §11); "pause":
 * it ends with no result.
 */
export type Next = "again" | "give_up" | "expire" | "pause";

/**
 * After a failed attempt: waits out the backoff — exponential with full
 * jitter (uniform in [0, base·2^(n-1)] for the n-th counted failure), at
 * least the answer's retry-after, at most 60 s — unless the attempts are
 * spent, the batch's deadline comes first, or the shard is stopped.
 */
export async function backOff(verdict: { whole: boolean; waitMs: number | null }, attempts: Attempts, model: PricedModel, task: RunTask, control: ShardControl, clock: Clock = realClock): Promise<Next> {
  const u = model.upstreamIdx;
  const mem = healthMemory();
  const stopped = () => stopStateOf(control) !== null;
  // Failures in a row made the upstream suspect: its probe says whether
  // this was an outage (forgiven) or these requests' own failures.
  if (verdict.whole) await settled(u, stopped);
  const n = attempts.counted();
  // Down: the gate waits for the upstream's return.
  if (mem && verdict.whole && isDown(mem, u)) return "again";
  if (n >= task.maxAttempts) return "give_up";
  const state = stopStateOf(control);
  if (state !== null) return state === "pause" ? "pause" : "give_up";
  const backoff = clock.random() * task.retryBaseMs * 2 ** (n - 1);
  const delay = Math.min(Math.max(verdict.waitMs ?? 0, backoff), 60_000);
  if (clock.now() + delay >= task.deadline) return verdict.whole ? "expire" : "give_up";
  // A cancel or a shutdown must not wait out a long retry-after; an outage
  // that begins meanwhile sends the line to the gate at once.
  await sleepUnless(delay, () => stopped() || (mem !== null && !isUp(mem, u)), clock);
  const after = stopStateOf(control);
  return after === "pause" ? "pause" : after === "stop" ? "give_up" : "again";
}

/** Sleeps `ms`, waking every 250 ms to see whether `stop()` has become true. */
async function sleepUnless(ms: number, stop: () => boolean, clock: Clock): Promise<void> {
  const until = clock.now() + ms;
  for (let left = ms; left > 0 && !stop(); left = until - clock.now()) await clock.sleep(Math.min(left, 250));
}

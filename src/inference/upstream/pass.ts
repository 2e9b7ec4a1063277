// The pass-through of an interactive request for an upstream model
// (docs/CONTRACT.md §6, §13), written once for every thread that answers
// one: the main thread (chat completions, responses, completions,
// Anthropic's messages, the upstream-only kinds) and the front threads
// (chat completions: src/http/front). The body goes upstream untouched (but
// for the mapped model name); the answer comes back as the upstream sent
// it: 4xx verbatim, 5xx/timeouts/unreachable as our errors before the first
// byte, a stream event by event as it arrives (a client disconnect cancels
// the upstream request). A call that never reached its engine (refused)
// goes to another replica of the model, if it has one (callTarget). Output
// tokens count against the key's tpm, read the way the endpoint's module
// says.
//
// What only the server's state can decide goes through an admission port:
// the key, the model, rate limits and a slot (admit), the upstream's health
// and the replica's counts (answered, failed, cancelled), the slot's
// release and the tokens (settle, streamEnded), a revocation that ends a
// stream (hold). The main thread implements it directly
// (./mainAdmission.ts); a front thread by message to the main thread
// (src/http/front/fast.ts). So both answer with the same steps in the same
// order, and a client cannot tell which thread answered it.
//
// Loaded by front threads: imports nothing of the main thread's state.
import type { StreamHold } from "../../auth/revocations";
import type { EndpointKind, EndpointPath } from "../../endpoints/kind";
import { ApiError } from "../../errors";
import { UNMEASURED, slotOutcome, type SlotOutcome } from "../admission/slotCells";
import type { UpstreamAnswer } from "./answer";
import { Deadline } from "./deadline";
import { CallFailure, classify, neverSent, type Fate } from "./fate";
import { StreamUsage, answerTokens, attachDeadline, passThrough, upstreamFailure, upstreamText, type UpstreamNamed } from "./interactive";
import { postJson, type UpstreamTarget } from "./transport";

/** Where a call goes: the engine (a replica, or the upstream's base_url), and the names it is known by. */
export interface CallTarget {
  target: UpstreamTarget;
  /** Named in errors; its timeout bounds the call. */
  upstream: UpstreamNamed;
  /** The model's name at the upstream (model_map), sent in the body. */
  upstreamModel: string;
}

/** An admitted request: where it goes, and what its answer carries. */
export interface Admitted extends CallTarget {
  /** x-ratelimit-* for the answer. */
  headers: Record<string, string>;
  /** Whether completion tokens count against a tpm limit (else the answer need not be read for usage). */
  metersTokens: boolean;
  requestId: string;
}

/** What a call tells the side that keeps the upstream's health and its replicas' counts. */
export interface CallPort {
  /** The answer's head came (`fate`: the classifier's verdict on it). */
  answered(status: number, fate: Fate): void;
  /** The call threw, the client still there: the failure is counted, and what to answer thrown (an ApiError on the main thread). */
  failed(failure: CallFailure): never | Promise<never>;
  /** The client went away during the call: nobody's fault, not counted. */
  cancelled(): void;
  /**
   * The call never reached its engine (./fate.ts neverSent): counted as its
   * replica's failure, and another replica to send it to instead; null when
   * the model has none left (nothing counted then: failed() follows).
   */
  elsewhere(failure: CallFailure): UpstreamTarget | null | Promise<UpstreamTarget | null>;
}

/**
 * Replicas a request goes to after the one chosen refused it (at most; and
 * never one it tried): a model of two or three engines survives any one
 * refusing, and a request of a model of many does not walk all of them
 * while they come down one by one.
 */
export const MAX_ELSEWHERE = 2;

/** The steps of a pass-through that need the server's state (see the top of this file). */
export interface AdmissionPort extends CallPort {
  /** Key, model, rate limits, slot, the upstream's health and the replica: the call's target, or the error to answer thrown. */
  admit(): Admitted | Promise<Admitted>;
  /** The request is over but for what the client still reads (its answer came whole, or none came): the slot goes with `outcome`, `tokens` count against tpm. */
  settle(outcome: SlotOutcome, tokens: number): void;
  /** A streamed answer ended (or the client left it): the slot goes, its `tokens` count against tpm. */
  streamEnded(tokens: number): void;
  /** Ends the stream when the key is revoked (none: never). */
  hold(): StreamHold | undefined;
}

/** What the pass-through reads of the endpoint kind. */
export type PassKind = Pick<EndpointKind, "path" | "readUsage" | "readStreamEvent">;

export interface PassRequest {
  kind: PassKind;
  body: Record<string, unknown>;
  /** The text `body` was parsed from, unchanged since (see callTarget). */
  raw: string | undefined;
  /** Whether the client asked for a stream (checked by the caller). */
  stream: boolean;
  /** The client's signal, aborted when it goes away; read only when needed (see Deadline). */
  clientSignal: () => AbortSignal;
}

/**
 * One call to an admitted request's engine. Answers once the status and
 * headers came (the body is read from the answer); a failure is the port's
 * to count and to word; a client that left rethrows the abort (answered
 * 499, not counted as an upstream fault).
 *
 * A replica that refused the connection (or whose host has no address)
 * cannot have started the request: it goes to another replica of the model
 * (port.elsewhere), within the same deadline, and the client sees one
 * answer. Only then: after a reset, a timeout or any answer the engine may
 * be running it, and sending it again could run it twice.
 */
export async function callTarget(port: CallPort, to: CallTarget, path: EndpointPath, body: Record<string, unknown>, raw: string | undefined, clientSignal: () => AbortSignal): Promise<UpstreamAnswer> {
  const deadline = new Deadline(to.upstream.timeoutMs, clientSignal);
  // The text as it came when the model's name needs no mapping: spreading
  // and stringifying the body again was ≈2% of the main thread in the chat
  // pass-through.
  const payload = raw !== undefined && body.model === to.upstreamModel ? raw : JSON.stringify({ ...body, model: to.upstreamModel });
  let res: UpstreamAnswer;
  let target = to.target;
  for (let tries = 0; ; tries++) {
    try {
      res = await postJson(target, path, payload, deadline);
      break;
    } catch (e) {
      const failure = new CallFailure(e, deadline.timedOut, deadline.clientGone());
      if (failure.clientGone) {
        deadline.clear();
        port.cancelled();
        throw e;
      }
      const next = tries < MAX_ELSEWHERE && neverSent(failure) ? await port.elsewhere(failure) : null;
      if (next) {
        target = next;
        continue;
      }
      deadline.clear();
      return port.failed(failure);
    }
  }
  attachDeadline(res, to.upstream, deadline);
  port.answered(res.status, classify(res));
  return res;
}

/**
 * The pass-through: admitted through `port`, called, the answer relayed
 * whole or streamed. Errors are thrown (ApiErrors, an abort), for the
 * caller's error mapping: the main thread's own (src/app.ts), or a front
 * thread's in the same words.
 */
export async function passUpstream(port: AdmissionPort, { kind, body, raw, stream, clientSignal }: PassRequest): Promise<Response> {
  const go = await port.admit();
  let handedOff = false;
  /** What the slot's release tells the adaptive controller: a 2xx's time, a 429/503, or nothing (inference/admission/scheduler.ts). */
  let outcome: SlotOutcome = UNMEASURED;
  let tokens = 0;
  try {
    const res = await callTarget(port, go, kind.path, body, raw, clientSignal);
    outcome = slotOutcome(res.status);
    if (!res.ok) {
      const failure = await upstreamFailure(go.upstream, res, go.headers);
      if (failure instanceof ApiError) throw failure;
      failure.headers.set("x-request-id", go.requestId);
      return failure;
    }
    if (stream && res.body) {
      // Output tokens count against tpm: as the stream reports them (a usage
      // event), else as counted from its deltas (StreamUsage).
      const usage = go.metersTokens && kind.readStreamEvent ? new StreamUsage(kind.readStreamEvent) : null;
      // The answer's headers are built before the slot is handed to the
      // stream: a value Headers refuses throws while finally still settles
      // the slot, and the upstream answer is dropped (its connection closed).
      let answerHeaders: Headers;
      try {
        answerHeaders = new Headers({ "content-type": res.headers.get("content-type") ?? "text/event-stream", "cache-control": "no-cache", ...go.headers, "x-request-id": go.requestId });
      } catch (e) {
        await res.body.cancel().catch(() => {});
        throw e;
      }
      const end = () => {
        usage?.finish();
        port.streamEnded(usage?.completionTokens ?? 0);
      };
      handedOff = true;
      return new Response(passThrough(res, end, usage ? (c) => usage.push(c) : undefined, port.hold()), { headers: answerHeaders });
    }
    const text = await upstreamText(res);
    tokens = answerTokens(go.upstream, kind, text, go.metersTokens);
    // The request id goes on with the other headers: setting it on the
    // Response afterwards costs a native Headers call a request.
    return new Response(text, { headers: { "content-type": "application/json", ...go.headers, "x-request-id": go.requestId } });
  } finally {
    if (!handedOff) port.settle(outcome, tokens);
  }
}

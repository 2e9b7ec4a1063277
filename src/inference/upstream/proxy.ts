// An interactive request for an upstream model, passed through (docs/CONTRACT.md §6,
// §13): the same for every endpoint kind that answers with JSON or an SSE
// stream (chat completions, responses, completions). The body goes upstream
// untouched (but for the mapped model name); the answer comes back as the
// upstream sent it: 4xx verbatim, 5xx/timeouts/unreachable as our errors
// before the first byte, a stream event by event as it arrives (a client
// disconnect cancels the upstream request). Output tokens count against the
// key's tpm, read the way the endpoint's module says.
import { requestIdOf } from "../../http/requestId";
import { streamHold } from "../../auth/revocations";
import type { Principal } from "../../auth/verify";
import type { AppContext } from "../../context";
import type { EndpointKind } from "../../endpoints/kind";
import { ApiError } from "../../errors";
import { rawBodyOf } from "../../http/jsonBody";
import { admit } from "../admission/admit";
import { ANSWERED, UNMEASURED, slotOutcome, type SlotOutcome } from "../admission/slotCells";
import type { ModelEntry } from "../registry";
import { callUpstream } from "./call";
import { StreamUsage, answerTokens, passThrough, upstreamFailure, upstreamText } from "./interactive";

export interface ProxyRequest {
  model: ModelEntry;
  kind: EndpointKind;
  body: Record<string, unknown>;
  /** Whether the client asked for a stream (checked by the caller). */
  stream: boolean;
  /** The prompt's tokens as offpeak counts them (rate limits are checked before the call). */
  promptTokens: number;
  request: Request;
}

export async function proxyUpstream(ctx: AppContext, principal: Principal, { model, kind, body, stream, promptTokens, request }: ProxyRequest): Promise<Response> {
  const { headers, release, metersTokens } = await admit(ctx, principal, model, promptTokens, () => request.signal);
  let handedOff = false;
  /** What the slot's release tells the adaptive controller: a 2xx's time, a 429/503, or nothing (inference/admission/scheduler.ts). */
  let outcome: SlotOutcome = UNMEASURED;
  try {
    const res = await callUpstream({ model, path: kind.path, body, raw: rawBodyOf(request), clientSignal: () => request.signal });
    outcome = slotOutcome(res.status);
    if (!res.ok) {
      const failure = await upstreamFailure(model, res, headers);
      if (failure instanceof ApiError) throw failure;
      return failure;
    }
    if (stream && res.body) {
      // Output tokens count against tpm: as the stream reports them (a usage
      // event), else as counted from its deltas (StreamUsage).
      const usage = metersTokens && kind.readStreamEvent ? new StreamUsage(kind.readStreamEvent) : null;
      const end = () => {
        release(ANSWERED);
        usage?.finish();
        if (usage?.completionTokens) ctx.rateLimiter.charge(principal.keyId, usage.completionTokens);
      };
      // The answer's headers are built before the slot is handed to the
      // stream: a value Headers refuses throws while finally still releases
      // the slot, and the upstream answer is dropped (its connection closed).
      let answerHeaders: Headers;
      try {
        answerHeaders = new Headers({ "content-type": res.headers.get("content-type") ?? "text/event-stream", "cache-control": "no-cache", ...headers, "x-request-id": requestIdOf(request) });
      } catch (e) {
        await res.body.cancel().catch(() => {});
        throw e;
      }
      handedOff = true;
      return new Response(passThrough(res, end, usage ? (c) => usage.push(c) : undefined, streamHold(ctx.db, principal.keyId)), { headers: answerHeaders });
    }
    const text = await upstreamText(res);
    const tokens = answerTokens(model, kind, text, metersTokens);
    if (tokens) ctx.rateLimiter.charge(principal.keyId, tokens);
    // The request id goes on with the other headers (withRequestId, app.ts,
    // then finds it there): setting it on the Response afterwards costs a
    // native Headers call a request.
    return new Response(text, { headers: { "content-type": "application/json", ...headers, "x-request-id": requestIdOf(request) } });
  } finally {
    if (!handedOff) release(outcome);
  }
}

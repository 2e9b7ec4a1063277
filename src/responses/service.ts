// POST /responses: offpeak-echo (plain or a Responses event stream), or an
// upstream model (passed through untouched: inference/upstream/proxy.ts).
import { streamHold } from "../auth/revocations";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { responses } from "../endpoints/responses";
import { IdStream, nowSeconds } from "../ids";
import { admit, resolveModel } from "../inference/admission/admit";
import { echoResponseJson, planResponse, responseEvents, responseIds, responseInputTokens, responseUsage } from "../inference/builtin/echoResponses";
import { pacedWait } from "../inference/builtin/echoStream";
import { proxyUpstream } from "../inference/upstream/proxy";
import { sseResponse } from "../http/sse";
import { checkStreamFields } from "../chatCompletions/fields";

const ids = new IdStream();

export async function createResponse(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, responses);
  const stream = checkStreamFields(body);
  if (model.kind !== responses.builtin) return proxyUpstream(ctx, principal, { model, kind: responses, body, stream, promptTokens: responseInputTokens(body), request });

  const plan = planResponse(body); // validates before admission: a bad request costs no quota
  const { headers, release } = await admit(ctx, principal, model, plan.inputTokens, () => request.signal);
  const pace = { latencyMs: model.latencyMs, tokensPerSecond: model.tokensPerSecond };
  const r = responseIds(ids, plan, nowSeconds());
  ctx.rateLimiter.charge(principal.keyId, responseUsage(plan).output_tokens);
  if (stream) {
    const abort = new AbortController();
    return sseResponse(responseEvents(body, r, plan, pace, abort.signal), {
      headers,
      hold: streamHold(ctx.db, principal.keyId),
      named: true,
      onClose: () => {
        abort.abort();
        release();
      },
    });
  }
  try {
    await pacedWait(plan.tokens + (plan.reasoning?.tokens ?? 0), pace, request.signal);
    return new Response(echoResponseJson(body, r, plan, undefined, nowSeconds()), { headers: { "content-type": "application/json", ...headers } });
  } finally {
    release();
  }
}

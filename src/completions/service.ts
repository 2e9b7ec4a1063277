// POST /completions (legacy text completions): offpeak-echo (plain or
// streamed text_completion chunks), or an upstream model (passed through
// untouched: inference/upstream/proxy.ts).
import { streamHold } from "../auth/revocations";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { completions } from "../endpoints/completions";
import { newId, nowSeconds } from "../ids";
import { admit, resolveModel } from "../inference/admission/admit";
import { completionChunks, completionUsage, echoTextCompletion, planCompletion, promptTexts, promptTokensOfTexts } from "../inference/builtin/echoCompletions";
import { pacedWait } from "../inference/builtin/echoStream";
import { proxyUpstream } from "../inference/upstream/proxy";
import { sseResponse } from "../http/sse";
import { checkStreamFields } from "../chatCompletions/fields";

const json = (body: unknown, headers: Record<string, string>) => new Response(JSON.stringify(body), { headers: { "content-type": "application/json", ...headers } });

export async function createCompletion(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, completions);
  // offpeak reads the prompt for every model (its tokens count against tpm), so it checks it.
  const prompts = promptTexts(body.prompt);
  const stream = checkStreamFields(body);
  if (model.kind !== completions.builtin) return proxyUpstream(ctx, principal, { model, kind: completions, body, stream, promptTokens: promptTokensOfTexts(prompts), request });

  const plan = planCompletion(body, prompts); // validates before admission: a bad request costs no quota
  const { headers, release } = await admit(ctx, principal, model, plan.promptTokens, () => request.signal);
  const pace = { latencyMs: model.latencyMs, tokensPerSecond: model.tokensPerSecond };
  const id = newId("cmpl-");
  const usage = completionUsage(plan);
  ctx.rateLimiter.charge(principal.keyId, usage.completion_tokens);
  if (stream) {
    const abort = new AbortController();
    return sseResponse(completionChunks(body, id, nowSeconds(), plan, pace, abort.signal), {
      headers,
      hold: streamHold(ctx.db, principal.keyId),
      onClose: () => {
        abort.abort();
        release();
      },
    });
  }
  try {
    await pacedWait(Math.max(0, ...plan.choices.map((c) => c.tokens)), pace, request.signal);
    return json(echoTextCompletion(id, nowSeconds(), plan), headers);
  } finally {
    release();
  }
}

// POST /chat/completions: built-in echo (plain or streamed) or an upstream
// (proxied; streams passed through chunk by chunk).
import { streamHold } from "../auth/revocations";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { checkMessages, checkStreamFields } from "./fields";
import { newId, nowSeconds } from "../ids";
import { admit, resolveModel } from "../inference/admission/admit";
import { echoCompletion, echoUsage, planEcho } from "../inference/builtin/echo";
import { echoChunks, pacedDelay } from "../inference/builtin/echoStream";
import { sseResponse } from "../http/sse";
import { promptTokensOf } from "../inference/builtin/tokens";
import { proxyUpstream } from "../inference/upstream/proxy";
import { chatCompletions as chatCompletionsKind } from "../endpoints/chatCompletions";

const json = (body: unknown, headers: Record<string, string>) => new Response(JSON.stringify(body), { headers: { "content-type": "application/json", ...headers } });


export async function chatCompletions(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, chatCompletionsKind);
  checkMessages(body);
  const stream = checkStreamFields(body);
  if (model.kind === "echo") {
    const plan = planEcho(body); // validates before admission: a bad request costs no quota
    const { headers, release } = await admit(ctx, principal, model, plan.promptTokens, () => request.signal);
    const pace = { latencyMs: model.latencyMs, tokensPerSecond: model.tokensPerSecond };
    const id = newId("chatcmpl-");
    ctx.rateLimiter.charge(principal.keyId, echoUsage(plan).completion_tokens);
    if (stream) {
      const abort = new AbortController();
      return sseResponse(echoChunks(body, id, nowSeconds(), pace, abort.signal, plan), {
        headers,
        hold: streamHold(ctx.db, principal.keyId),
        onClose: () => {
          abort.abort();
          release();
        },
      });
    }
    try {
      await pacedDelay(plan, pace, request.signal);
      return json(echoCompletion(body, id, nowSeconds(), plan), headers);
    } finally {
      release();
    }
  }

  return proxyUpstream(ctx, principal, { model, kind: chatCompletionsKind, body, stream, promptTokens: promptTokensOf(body.messages), request });
}

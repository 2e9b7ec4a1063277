// POST /chat/completions: built-in echo (plain or streamed) or an upstream
// (proxied; streams passed through chunk by chunk).
import { streamHold } from "../auth/revocations";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { newId, nowSeconds } from "../ids";
import { admit, resolveModel } from "../inference/admission/admit";
import { echoCompletion, echoUsage, planEcho } from "../inference/builtin/echo";
import { echoChunks, pacedDelay } from "../inference/builtin/echoStream";
import { sseResponse } from "../http/sse";
import { promptTokensOf } from "../inference/builtin/tokens";
import { proxyUpstream } from "../inference/upstream/proxy";
import { chatCompletions as chatCompletionsKind } from "../endpoints/chatCompletions";

const json = (body: unknown, headers: Record<string, string>) => new Response(JSON.stringify(body), { headers: { "content-type": "application/json", ...headers } });


/**
 * offpeak itself reads `stream` and `stream_options` (for every model), so it
 * checks their types: a `stream: "yes"` read as false would be answered with
 * plain JSON while an upstream it is sent on to might stream. null = not given.
 * stream_options without stream:true is refused, as OpenAI refuses it.
 */
export function checkStreamFields(body: Record<string, unknown>): boolean {
  const { stream, stream_options: opts } = body;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") throw new ApiError("invalid_value", "stream must be a boolean", { param: "stream" });
  if (opts !== undefined && opts !== null) {
    if (typeof opts !== "object" || Array.isArray(opts)) throw new ApiError("invalid_value", "stream_options must be an object", { param: "stream_options" });
    const include = (opts as { include_usage?: unknown }).include_usage;
    if (include !== undefined && include !== null && typeof include !== "boolean")
      throw new ApiError("invalid_value", "stream_options.include_usage must be a boolean", { param: "stream_options.include_usage" });
    // As OpenAI does: the options of a stream that is not asked for are a client mistake.
    if (stream !== true) throw new ApiError("invalid_value", "stream_options is only allowed when stream is true", { param: "stream_options" });
  }
  return stream === true;
}

export async function chatCompletions(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, chatCompletionsKind);
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw new ApiError("invalid_value", "messages must be a non-empty array", { param: "messages" });
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

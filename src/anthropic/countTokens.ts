// POST /v1/messages/count_tokens → {input_tokens} (docs/CONTRACT.md §22),
// where the model can count: the built-in model counts as it does for its
// answers (the `usage.input_tokens` a message would report); an upstream
// with `api: "anthropic"` is asked itself; any other upstream model is a
// 400 (an OpenAI-compatible engine has no standard way to count a chat).
// Counting is free: no rate-limit charge, no model slot.
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { rawBodyOf } from "../http/jsonBody";
import { requestIdOf } from "../http/requestId";
import { resolveModel } from "../inference/admission/admit";
import { promptTokensOf } from "../inference/builtin/tokens";
import { callUpstream } from "../inference/upstream/call";
import { upstreamFailure, upstreamText } from "../inference/upstream/interactive";
import { messages as messagesKind } from "./kind";
import { toChatRequest } from "./request";
import { anthropicError } from "./service";

export async function countMessageTokens(ctx: AppContext, _principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, messagesKind);
  const id = requestIdOf(request);
  const headers = { "content-type": "application/json", "x-request-id": id, "request-id": id };
  if (model.api === "anthropic") {
    const res = await callUpstream({ model, path: "/messages/count_tokens", body, raw: rawBodyOf(request), clientSignal: () => request.signal });
    if (!res.ok) {
      const failure = await upstreamFailure(model, res);
      if (failure instanceof ApiError) throw failure;
      return anthropicError(failure, request);
    }
    return new Response(await upstreamText(res), { headers });
  }
  if (model.kind !== "echo")
    throw new ApiError("invalid_value", `model: '${model.id}' cannot count tokens (its upstream ${model.upstreamName} speaks the OpenAI API, which has no token count)`, { param: "model" });
  const chat = toChatRequest(body, { requireMaxTokens: false });
  return new Response(JSON.stringify({ input_tokens: promptTokensOf(chat.messages) }), { headers });
}

import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { admit, resolveModel } from "../inference/admission/admit";
import { embeddingInputs, embeddingsResponse, planEmbeddings } from "../inference/builtin/embed";
import { countTokens } from "../inference/builtin/tokens";
import { callUpstream } from "../inference/upstream/call";
import { checkLooksLikeJson, upstreamFailure, upstreamText } from "../inference/upstream/interactive";
import { embeddings } from "../endpoints/embeddings";
import { rawBodyOf } from "../http/jsonBody";

export async function createEmbeddings(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, embeddings);
  // Built-in: every field is checked before admission, so a bad request costs no quota.
  const plan = model.kind === embeddings.builtin ? planEmbeddings(body) : null;
  const texts = plan?.texts ?? embeddingInputs(body.input);
  const tokens = texts.reduce((n, t) => n + countTokens(t), 0);
  const { headers, release } = await admit(ctx, principal, model, tokens, () => request.signal);
  try {
    if (plan) {
      return new Response(JSON.stringify(embeddingsResponse(body, plan!)), { headers: { "content-type": "application/json", ...headers } });
    }
    const res = await callUpstream({ model, path: embeddings.path, body, raw: rawBodyOf(request), clientSignal: () => request.signal });
    if (!res.ok) {
      const failure = await upstreamFailure(model, res, headers);
      if (failure instanceof ApiError) throw failure;
      return failure;
    }
    const text = await upstreamText(res);
    checkLooksLikeJson(model, text, headers);
    return new Response(text, { headers: { "content-type": "application/json", ...headers } });
  } finally {
    release();
  }
}

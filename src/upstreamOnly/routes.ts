// POST /moderations, /score and /rerank (docs/CONTRACT.md §22): the endpoint
// kinds only upstream models serve (src/endpoints/upstreamOnly.ts). Each is
// an interactive inference route like /embeddings: JSON only, `model`
// required and one that serves the kind (a built-in model: 404
// model_not_found), admitted against the key's rate limits and a slot of
// the model, then passed to the engine untouched (but for the mapped model
// name) and its answer passed back (inference/upstream/proxy.ts). offpeak
// reads only the input's text, for tpm.
import { t } from "elysia";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { moderations } from "../endpoints/moderations";
import { rerank } from "../endpoints/rerank";
import { score } from "../endpoints/score";
import type { UpstreamOnlyKind } from "../endpoints/upstreamOnly";
import { resolveModel } from "../inference/admission/admit";
import { countTokens } from "../inference/builtin/tokens";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { proxyUpstream } from "../inference/upstream/proxy";

/** The tokens of every string in `value` (strings, arrays, objects such as multimodal parts or {text} documents). */
function textTokens(value: unknown, depth = 0): number {
  if (typeof value === "string") return countTokens(value);
  if (depth > 8 || value === null || typeof value !== "object") return 0;
  let n = 0;
  for (const v of Array.isArray(value) ? value : Object.values(value)) n += textTokens(v, depth + 1);
  return n;
}

const handleFor =
  (kind: UpstreamOnlyKind) =>
  (ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> => {
    const model = resolveModel(ctx, body.model, kind);
    const promptTokens = kind.inputFields.reduce((n, f) => n + textTokens(body[f]), 0);
    return proxyUpstream(ctx, principal, { model, kind, body, stream: false, promptTokens, request });
  };

const routeOf = (kind: UpstreamOnlyKind, summary: string, fields: string): InferenceRoute => ({
  kind,
  body: t.Object({ model: t.String({ description: "An upstream model: no built-in model serves this endpoint." }) }, { additionalProperties: true, description: fields }),
  summary,
  handle: handleFor(kind),
});

export const moderationsRoute = routeOf(moderations, "Classify text (and images) for moderation (upstream models only)", "OpenAI's moderations request: input, model.");
export const scoreRoute = routeOf(score, "Score text pairs (vLLM's /score; upstream models only)", "vLLM's score request: model, text_1 and text_2 (or data_1/data_2, queries/documents).");
export const rerankRoute = routeOf(rerank, "Rerank documents against a query (vLLM's /rerank; upstream models only)", "vLLM's rerank request: model, query, documents, top_n.");

export const UPSTREAM_ONLY_ROUTES: readonly InferenceRoute[] = [moderationsRoute, scoreRoute, rerankRoute];

export const upstreamOnlyRoutes = (ctx: AppContext) => {
  const [first, ...rest] = UPSTREAM_ONLY_ROUTES.map((r) => inferenceRoutePlugin(ctx, r));
  return rest.reduce((app, r) => app.use(r), first!);
};

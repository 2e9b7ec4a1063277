import { t } from "elysia";
import type { AppContext } from "../context";
import { responses as kind } from "../endpoints/responses";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { createResponse } from "./service";

export const responsesRoute: InferenceRoute = {
  kind,
  // Only what offpeak reads is described; every other field passes through
  // to the model untouched (additionalProperties keeps Elysia from dropping it).
  body: t.Object(
    {
      model: t.String(),
      input: t.Optional(t.Unknown({ description: "A string (one user message) or an array of input items. Required for offpeak-echo." })),
      instructions: t.Optional(t.Unknown({ description: "A system (developer) message; counted in input_tokens." })),
      max_output_tokens: t.Optional(t.Unknown({ description: "Upper bound on output tokens, reasoning included; a cut answer has status incomplete." })),
      stream: t.Optional(t.Unknown({ description: "true: a Responses event stream (SSE)." })),
      reasoning: t.Optional(t.Unknown({ description: "{effort}: offpeak-echo reasons first (a reasoning item, counted in reasoning_tokens)." })),
      previous_response_id: t.Optional(t.Unknown({ description: "Passed to upstream models; offpeak-echo stores no responses (400)." })),
    },
    { additionalProperties: true },
  ),
  summary: "Create a model response (Responses API; stream: true for SSE events)",
  handle: createResponse,
};

export const responsesRoutes = (ctx: AppContext) => inferenceRoutePlugin(ctx, responsesRoute);

import { t } from "elysia";
import type { AppContext } from "../context";
import { completions as kind } from "../endpoints/completions";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { createCompletion } from "./service";

export const completionsRoute: InferenceRoute = {
  kind,
  // Only what offpeak reads is described; every other field passes through
  // to the model untouched (additionalProperties keeps Elysia from dropping it).
  body: t.Object(
    {
      model: t.String(),
      prompt: t.Optional(t.Unknown({ description: "Required: a string, an array of strings, an array of token ids, or an array of token-id arrays." })),
      max_tokens: t.Optional(t.Unknown({ description: "offpeak-echo: no default limit (OpenAI's is 16); 0 with echo gives the prompt alone." })),
      stream: t.Optional(t.Unknown({ description: "true: an SSE stream of text_completion chunks ending in data: [DONE]." })),
      echo: t.Optional(t.Unknown({ description: "Put the prompt before the completion." })),
      stop: t.Optional(t.Unknown()),
      n: t.Optional(t.Unknown()),
    },
    { additionalProperties: true },
  ),
  summary: "Create a text completion (legacy Completions API; stream: true for SSE)",
  handle: createCompletion,
};

export const completionsRoutes = (ctx: AppContext) => inferenceRoutePlugin(ctx, completionsRoute);

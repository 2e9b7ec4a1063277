import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { completions } from "../endpoints/completions";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "../inference/admission";
import { createCompletion } from "./service";

// Only what offpeak reads is described; every other field passes through to
// the model untouched (additionalProperties keeps Elysia from dropping it).
const CompletionsBody = t.Object(
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
);

export const completionsRoutes = (ctx: AppContext) =>
  new Elysia({ detail: { tags: ["inference"] } }).post(completions.path, ({ request, body }) => createCompletion(ctx, principalOf(request), body as Record<string, unknown>, request), {
    parse: jsonOnly,
    transform: requireModel,
    body: CompletionsBody,
    detail: { summary: "Create a text completion (legacy Completions API; stream: true for SSE)" },
  });

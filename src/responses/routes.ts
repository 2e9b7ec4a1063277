import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { responses } from "../endpoints/responses";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "../inference/admission";
import { createResponse } from "./service";

// Only what offpeak reads is described; every other field passes through to
// the model untouched (additionalProperties keeps Elysia from dropping it).
const ResponsesBody = t.Object(
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
);

export const responsesRoutes = (ctx: AppContext) =>
  new Elysia({ detail: { tags: ["inference"] } }).post(responses.path, ({ request, body }) => createResponse(ctx, principalOf(request), body as Record<string, unknown>, request), {
    parse: jsonOnly,
    transform: requireModel,
    body: ResponsesBody,
    detail: { summary: "Create a model response (Responses API; stream: true for SSE events)" },
  });

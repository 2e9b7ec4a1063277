import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "../inference/admission";
import { chatCompletions as kind } from "../endpoints/chatCompletions";
import { chatCompletions } from "./service";

// Only what we must read is checked here; every other field passes through
// to the model untouched (additionalProperties keeps Elysia from dropping it).
const ChatBody = t.Object({ model: t.String(), messages: t.Array(t.Unknown()) }, { additionalProperties: true });

export const chatRoutes = (ctx: AppContext) =>
  new Elysia({ detail: { tags: ["inference"] } })
    .post(kind.path, ({ request, body }) => chatCompletions(ctx, principalOf(request), body as Record<string, unknown>, request), {
      parse: jsonOnly,
      transform: requireModel,
      body: ChatBody,
      detail: { summary: "Create a chat completion (stream: true for SSE)" },
    });

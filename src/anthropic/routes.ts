// Anthropic's Messages API (docs/CONTRACT.md §22), under both API bases:
// Anthropic's SDKs take the server's root as their base URL and call
// /v1/messages. The key may come as `x-api-key` (src/auth/plugin.ts); errors
// here are in Anthropic's shape (src/errors.ts, chosen in app.ts by path).
import { Type } from "@sinclair/typebox";
import { Elysia } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "../inference/modelField";
import { countMessageTokens } from "./countTokens";
import { createMessage } from "./service";

/** What the route reads before its service does: the rest is checked by the translation (./request.ts) or passed through. */
const messageBody = Type.Object(
  { model: Type.String(), messages: Type.Optional(Type.Array(Type.Unknown(), { description: "Required: the conversation, user and assistant turns." })) },
  { additionalProperties: true },
);

export const anthropicRoutes = (ctx: AppContext) =>
  new Elysia({ detail: { tags: ["anthropic"] } })
    .post("/messages", ({ request, body }) => createMessage(ctx, principalOf(request), body as Record<string, unknown>, request), {
      parse: jsonOnly,
      transform: requireModel,
      body: messageBody,
      detail: { summary: "Create a message (Anthropic's Messages API; stream: true for its events)" },
    })
    .post("/messages/count_tokens", ({ request, body }) => countMessageTokens(ctx, principalOf(request), body as Record<string, unknown>, request), {
      parse: jsonOnly,
      transform: requireModel,
      body: messageBody,
      detail: { summary: "Count a message's input tokens (Anthropic's Messages API)" },
    });

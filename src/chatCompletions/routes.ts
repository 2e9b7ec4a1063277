import { t } from "elysia";
import type { AppContext } from "../context";
import { chatCompletions as kind } from "../endpoints/chatCompletions";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { chatCompletions } from "./service";

export const chatRoute: InferenceRoute = {
  kind,
  // Only what we must read is described; every other field passes through
  // to the model untouched (additionalProperties keeps Elysia from dropping
  // it). A missing field is the service's to refuse, with its own message:
  // Elysia cleans a body before checking it, which turns an absent required
  // field into a type error, while the direct dispatch checks the body as
  // sent; only optional fields read the same both ways.
  body: t.Object(
    { model: t.String(), messages: t.Optional(t.Array(t.Unknown(), { description: "Required: a non-empty array of messages." })) },
    { additionalProperties: true },
  ),
  summary: "Create a chat completion (stream: true for SSE)",
  handle: chatCompletions,
};

export const chatRoutes = (ctx: AppContext) => inferenceRoutePlugin(ctx, chatRoute);

import type { AppContext } from "../context";
import { chatCompletions as kind } from "../endpoints/chatCompletions";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { chatBody } from "./fields";
import { chatCompletions } from "./service";

export const chatRoute: InferenceRoute = {
  kind,
  body: chatBody,
  summary: "Create a chat completion (stream: true for SSE)",
  handle: chatCompletions,
};

export const chatRoutes = (ctx: AppContext) => inferenceRoutePlugin(ctx, chatRoute);

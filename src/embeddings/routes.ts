import { t } from "elysia";
import type { AppContext } from "../context";
import { embeddings as kind } from "../endpoints/embeddings";
import { inferenceRoutePlugin, type InferenceRoute } from "../inference/route";
import { createEmbeddings } from "./service";

export const embeddingsRoute: InferenceRoute = {
  kind,
  // A missing input is the service's to refuse (see chat/routes.ts).
  body: t.Object(
    { model: t.String(), input: t.Optional(t.Unknown({ description: "Required: a string, an array of strings, or arrays of token ids." })) },
    { additionalProperties: true },
  ),
  summary: "Create embeddings",
  handle: createEmbeddings,
};

export const embeddingsRoutes = (ctx: AppContext) => inferenceRoutePlugin(ctx, embeddingsRoute);

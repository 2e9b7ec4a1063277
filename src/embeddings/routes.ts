import { Elysia, t } from "elysia";
import { principalOf, scopes } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../inference/jsonBody";
import { createEmbeddings } from "./service";

const EmbeddingsBody = t.Object({ model: t.String(), input: t.Unknown() }, { additionalProperties: true });

export const embeddingsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/embeddings", detail: { tags: ["inference"] } })
    .use(scopes)
    .post("", ({ request, body }) => createEmbeddings(ctx, principalOf(request), body as Record<string, unknown>, request), {
      scope: "inference",
      parse: jsonOnly,
      body: EmbeddingsBody,
      detail: { summary: "Create embeddings" },
    });

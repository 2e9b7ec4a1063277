import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { createEmbeddings } from "./service";

const EmbeddingsBody = t.Object({ model: t.String(), input: t.Unknown() }, { additionalProperties: true });

export const embeddingsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/embeddings", detail: { tags: ["inference"] } })
    .post("", ({ request, body }) => createEmbeddings(ctx, principalOf(request), body as Record<string, unknown>, request), {
      parse: jsonOnly,
      body: EmbeddingsBody,
      detail: { summary: "Create embeddings" },
    });

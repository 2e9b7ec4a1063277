import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "../inference/admission";
import { embeddings } from "../endpoints/embeddings";
import { createEmbeddings } from "./service";

const EmbeddingsBody = t.Object({ model: t.String(), input: t.Unknown() }, { additionalProperties: true });

export const embeddingsRoutes = (ctx: AppContext) =>
  new Elysia({ detail: { tags: ["inference"] } })
    .post(embeddings.path, ({ request, body }) => createEmbeddings(ctx, principalOf(request), body as Record<string, unknown>, request), {
      parse: jsonOnly,
      transform: requireModel, // a missing model: missing_field, not the schema's invalid_value
      body: EmbeddingsBody,
      detail: { summary: "Create embeddings" },
    });

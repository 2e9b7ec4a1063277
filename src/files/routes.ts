import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { enumParam, intParam } from "../http/query";
import { fileContentResponse } from "./content";
import { deleteFile, fileView, getFile, listFiles } from "./service";
import { uploadFile } from "./upload";

const FileRecord = t.Object({
  id: t.String(),
  object: t.Literal("file"),
  bytes: t.Integer(),
  created_at: t.Integer(),
  filename: t.String(),
  purpose: t.String(),
  status: t.String(),
  expires_at: t.Nullable(t.Integer()),
  status_details: t.Nullable(t.String()),
});

const ListQuery = t.Object({
  purpose: t.Optional(t.String()),
  limit: t.Optional(t.String()),
  order: t.Optional(t.String()),
  after: t.Optional(t.String()),
});

export const filesRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/files", detail: { tags: ["files"] } })
    // A replay of an Idempotency-Key's first answer (src/idempotency) is a Response, which Elysia sends as it is.
    .post("", ({ request }) => uploadFile(ctx, principalOf(request), request) as Promise<ReturnType<typeof fileView>>, {
      // The body is read as a stream by uploadFile; Elysia must not buffer it.
      parse: "none",
      response: FileRecord,
      detail: { summary: "Upload a file (multipart: purpose, file)" },
    })
    .get(
      "",
      ({ request, query }) =>
        listFiles(ctx, principalOf(request).project, {
          purpose: query.purpose || undefined,
          limit: intParam(query.limit, "limit", 1, 10000, 10000),
          order: enumParam(query.order, "order", ["asc", "desc"] as const, "desc"),
          after: query.after || undefined,
        }),
      { query: ListQuery, detail: { summary: "List files" } },
    )
    .get("/:id", async ({ request, params }) => fileView(await getFile(ctx, principalOf(request).project, params.id)), {
      response: FileRecord,
      detail: { summary: "Retrieve a file record" },
    })
    .get(
      "/:id/content",
      async ({ request, params }) => fileContentResponse(ctx, await getFile(ctx, principalOf(request).project, params.id), request.headers.get("range")),
      { detail: { summary: "Download a file's bytes (supports Range)" } },
    )
    .delete("/:id", ({ request, params }) => deleteFile(ctx, principalOf(request).project, params.id), {
      detail: { summary: "Delete a file and its bytes" },
    });

import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { completeUpload } from "./complete";
import { addPart } from "./parts";
import { cancelUpload, createUpload, uploadView } from "./service";

const CreateBody = t.Object({
  // Checked in createUpload: Elysia would coerce "10" into 10 (docs/CONTRACT.md §10: a wrong type is a 400).
  bytes: t.Unknown(),
  filename: t.String(),
  mime_type: t.String(),
  purpose: t.String(),
  expires_after: t.Optional(t.Nullable(t.Object({ anchor: t.Optional(t.String()), seconds: t.Optional(t.Integer()) }))),
});

const CompleteBody = t.Object({
  part_ids: t.Array(t.String()),
  md5: t.Optional(t.Nullable(t.String())),
});

// Answers go out once their records' commits are on disk (syncCommits), as POST /files's.
export const uploadsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/uploads", detail: { tags: ["uploads"] } })
    .post(
      "",
      async ({ request, body }) => {
        const row = await createUpload(ctx, principalOf(request).project, body);
        await ctx.db.syncCommits();
        return uploadView(ctx, row);
      },
      {
        parse: jsonOnly,
        body: CreateBody,
        detail: { summary: "Create an upload (a file sent in parts)", description: "OpenAI's Uploads: then add parts, and complete with the part ids in order. Expires after an hour." },
      },
    )
    .post("/:id/parts", ({ request, params }) => addPart(ctx, principalOf(request), params.id, request), {
      // The body is read as a stream by addPart; Elysia must not buffer it.
      parse: "none",
      detail: { summary: "Add a part to an upload (multipart: data, at most 64 MiB)" },
    })
    .post("/:id/complete", ({ request, params, body }) => completeUpload(ctx, principalOf(request), params.id, body), {
      parse: jsonOnly,
      body: CompleteBody,
      detail: {
        summary: "Complete an upload into a File",
        description: "The parts named, in that order, must add up to the upload's bytes; a batch file is checked line by line as a direct upload is. A refusal leaves the upload pending.",
      },
    })
    .post("/:id/cancel", async ({ request, params }) => uploadView(ctx, await cancelUpload(ctx, principalOf(request).project, params.id)), {
      parse: "none",
      detail: { summary: "Cancel an upload (its parts are removed)" },
    });

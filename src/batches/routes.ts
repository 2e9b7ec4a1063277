import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import { streamHold } from "../auth/revocations";
import type { AppContext } from "../context";
import { jsonOnly, rawBodyOf } from "../http/jsonBody";
import { withIdempotency } from "../idempotency";
import { intParam } from "../http/query";
import { batchView, cancelBatch, createBatch, getBatch, listBatches } from "./service";
import { batchEventsOf } from "./events";
import { retryBatch } from "./retry";
import { batchOutput } from "./output";

const CreateBody = t.Object({
  input_file_id: t.String(),
  endpoint: t.String(),
  completion_window: t.String(),
  metadata: t.Optional(t.Unknown()), // checked in checkMetadata: TypeBox's Record would coerce an array into an object
  output_expires_after: t.Optional(t.Nullable(t.Object({ anchor: t.Optional(t.String()), seconds: t.Optional(t.Integer()) }))),
});

export const batchesRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/batches", detail: { tags: ["batches"] } })
    .post(
      "",
      // Answered only once the record's commit is on disk (syncCommits), as the cancel below.
      // With an Idempotency-Key the same request within 24 h answers the same batch (src/idempotency).
      ({ request, body }) => {
        const principal = principalOf(request);
        return withIdempotency(ctx, request, principal, "POST /batches", rawBodyOf(request) ?? JSON.stringify(body), async () => {
          const row = await createBatch(ctx, principal.project, body);
          ctx.kickBatches();
          await ctx.db.syncCommits();
          return batchView(row);
        });
      },
      { parse: jsonOnly, body: CreateBody, detail: { summary: "Create a batch from an uploaded JSONL file" } },
    )
    .get(
      "",
      ({ request, query }) =>
        listBatches(ctx, principalOf(request).project, intParam(query.limit, "limit", 1, 100, 20), query.after || undefined, query.include === "message_batches"),
      {
        query: t.Object({ limit: t.Optional(t.String()), after: t.Optional(t.String()), include: t.Optional(t.String()) }),
        detail: { summary: "List batches, newest first", description: "include=message_batches lists Anthropic message batches too (marked `api: \"anthropic\"`), as the console and the CLI do." },
      },
    )
    .get("/:id", async ({ request, params }) => batchView(await getBatch(ctx, principalOf(request).project, params.id)), {
      detail: { summary: "Retrieve a batch" },
    })
    .get("/:id/events", async ({ request, params }) => {
      const principal = principalOf(request);
      return batchEventsOf(ctx).stream(await getBatch(ctx, principal.project, params.id), streamHold(ctx.db, principal.keyId));
    }, {
      detail: {
        summary: "Follow a batch (SSE)",
        description:
          "Server-sent events: `event: batch` with the batch record at once, again whenever its status, request_counts, status_details or estimated_completion_at change (at most every 500 ms; a final state at once), `: keep-alive` after 15 s without an event; closed after a final state.",
      },
    })
    .get("/:id/output", ({ request, params, query }) => batchOutput(ctx, principalOf(request).project, params.id, query.kind), {
      query: t.Object({ kind: t.Optional(t.String()) }),
      detail: {
        summary: "Result lines so far (JSON Lines)",
        description:
          "kind=output (default) or error: the result lines written so far, streamed, also while the batch runs; none yet is an empty 200. After the batch ends, the same bytes as its output or error file.",
      },
    })
    .post("/:id/retry", async ({ request, params }) => batchView(await retryBatch(ctx, principalOf(request).project, params.id)), {
      parse: "none",
      detail: {
        summary: "Retry the failed lines of a finished batch",
        description:
          "Creates a new input file from the original request lines of every line in the batch's error file, and a new batch on it with the same endpoint and window; metadata gets retry_of. 409 if the batch is not final or nothing failed.",
      },
    })
    .post(
      "/:id/cancel",
      async ({ request, params }) => {
        const row = await cancelBatch(ctx, principalOf(request).project, params.id);
        ctx.kickBatches();
        await ctx.db.syncCommits();
        return batchView(row);
      },
      { parse: "none", detail: { summary: "Cancel a batch" } },
    );

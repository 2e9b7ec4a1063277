// Anthropic's Message Batches (docs/CONTRACT.md §22) under both API bases
// (Anthropic's SDKs call /v1/messages/batches from the server's root).
// Scopes batches:write / batches:read (src/auth/routeScopes.ts); errors in
// Anthropic's shape, as on every /messages… path (src/app.ts).
//
// A message batch is a batch (docs/CONTRACT.md §5) made through another door:
// ./create.ts writes its input file and makes its row with the OpenAI
// route's createBatch; the engine runs it as any other; ./view.ts and
// ./results.ts show the row and its result files in Anthropic's shapes.
import { Elysia, t } from "elysia";
import { principalOf } from "../../auth/plugin";
import type { AppContext } from "../../context";
import { intParam } from "../../http/query";
import { createMessageBatch } from "./create";
import { messageBatchResults } from "./results";
import { cancelMessageBatch, deleteMessageBatch, getMessageBatch, listMessageBatches } from "./service";
import { messageBatchView } from "./view";

/** The server's root as the client reached it, for results_url (Anthropic's SDKs fetch that URL as given). */
const rootOf = (request: Request): string => new URL(request.url).origin;

export const messageBatchesRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/messages/batches", detail: { tags: ["anthropic"] } })
    .post(
      "",
      // Answered once the records' commit is on disk, as POST /batches; an Idempotency-Key's retry gets the first answer.
      ({ request }) =>
        createMessageBatch(ctx, principalOf(request), request, async (row) => {
          ctx.kickBatches();
          await ctx.db.syncCommits();
          return messageBatchView(ctx, row, rootOf(request));
        }),
      {
        // Read as a stream by createMessageBatch (up to 256 MB): Elysia must not buffer it.
        parse: "none",
        detail: {
          summary: "Create a message batch (Anthropic's Message Batches API)",
          description:
            "`{requests: [{custom_id, params}]}`: at most 100,000 requests or 256 MB; each `params` a Messages request (max_tokens required, no stream). Any bad request refuses the whole batch, naming it; nothing is made. Runs as a batch on /v1/chat/completions with a 24h window.",
        },
      },
    )
    .get(
      "",
      ({ request, query }) =>
        listMessageBatches(ctx, principalOf(request).project, rootOf(request), {
          limit: intParam(query.limit, "limit", 1, 1000, 20),
          beforeId: query.before_id || undefined,
          afterId: query.after_id || undefined,
        }),
      {
        query: t.Object({ limit: t.Optional(t.String()), before_id: t.Optional(t.String()), after_id: t.Optional(t.String()) }),
        detail: { summary: "List message batches, newest first (before_id / after_id, limit 1–1000)" },
      },
    )
    .get("/:id", async ({ request, params }) => messageBatchView(ctx, await getMessageBatch(ctx, principalOf(request).project, params.id), rootOf(request)), {
      detail: { summary: "Retrieve a message batch" },
    })
    .post(
      "/:id/cancel",
      async ({ request, params }) => {
        const row = await cancelMessageBatch(ctx, principalOf(request).project, params.id);
        ctx.kickBatches();
        await ctx.db.syncCommits();
        return messageBatchView(ctx, row, rootOf(request));
      },
      { parse: "none", detail: { summary: "Cancel a message batch" } },
    )
    .delete("/:id", ({ request, params }) => deleteMessageBatch(ctx, principalOf(request).project, params.id), {
      detail: { summary: "Delete an ended message batch and its files" },
    })
    .get("/:id/results", ({ request, params }) => messageBatchResults(ctx, principalOf(request).project, params.id), {
      detail: { summary: "An ended message batch's results (JSON Lines, streamed)" },
    });

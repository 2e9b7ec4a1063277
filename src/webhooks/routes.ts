import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { intParam } from "../http/query";
import { createEndpoint, deleteEndpoint, listDeliveries, listEndpoints } from "./service";

const CreateBody = t.Object(
  {
    url: t.Unknown(),
    events: t.Optional(t.Unknown()),
    project: t.Optional(t.Unknown()),
  },
  { additionalProperties: true },
);

/** docs/CONTRACT.md §12, scope `admin` (routeScopes.ts). */
export const webhooksRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/webhook_endpoints", detail: { tags: ["webhooks"] } })
    .post(
      "",
      async ({ request, body }) => {
        const created = await createEndpoint(ctx, principalOf(request).project, body);
        await ctx.db.syncCommits();
        return created;
      },
      { parse: jsonOnly, body: CreateBody, detail: { summary: "Create a webhook endpoint (its signing secret is shown once)" } },
    )
    .get("", ({ query }) => listEndpoints(ctx, query.project || undefined), {
      query: t.Object({ project: t.Optional(t.String()) }),
      detail: { summary: "List webhook endpoints (every project's; ?project= filters)" },
    })
    .delete(
      "/:id",
      async ({ params }) => {
        const deleted = await deleteEndpoint(ctx, params.id);
        await ctx.db.syncCommits();
        return deleted;
      },
      { detail: { summary: "Delete a webhook endpoint" } },
    )
    .get("/:id/deliveries", ({ params, query }) => listDeliveries(ctx, params.id, intParam(query.limit, "limit", 1, 1000, 100)), {
      query: t.Object({ limit: t.Optional(t.String()) }),
      detail: { summary: "Delivery attempts of an endpoint, newest first" },
    });

import { Elysia, t } from "elysia";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { addReplica, listUpstreams, removeReplica, setReplicaState } from "./service";

const AddBody = t.Object({ base_url: t.Unknown(), weight: t.Optional(t.Unknown()) }, { additionalProperties: false });
const PatchBody = t.Object({ state: t.Unknown() }, { additionalProperties: false });

/** docs/CONTRACT.md §21, scope `admin` (src/auth/routeScopes.ts). */
export const upstreamsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/upstreams", detail: { tags: ["upstreams"] } })
    .get("", () => listUpstreams(ctx), { detail: { summary: "List the upstreams and their replicas (state, load, health)" } })
    .post(
      "/:name/replicas",
      async ({ params, body, set }) => {
        const added = await addReplica(ctx, params.name, body);
        set.status = 201;
        return added;
      },
      { parse: jsonOnly, body: AddBody, detail: { summary: "Add a replica to an upstream: it takes work within seconds" } },
    )
    .patch("/:name/replicas/:id", ({ params, body }) => setReplicaState(ctx, params.name, params.id, body), {
      parse: jsonOnly,
      body: PatchBody,
      detail: { summary: "Drain a replica (no new requests; what it runs finishes) or make it active again" },
    })
    .delete("/:name/replicas/:id", ({ params }) => removeReplica(ctx, params.name, params.id), {
      detail: { summary: "Remove a replica: it drains, then leaves the set" },
    });

import { Elysia, t } from "elysia";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { createKey, envAdminKeyView, listKeys, revokeKey } from "./service";

const CreateKeyBody = t.Object({
  name: t.String(),
  scopes: t.Optional(t.Nullable(t.Array(t.String()))),
  project: t.Optional(t.Nullable(t.String())),
  rate_limits: t.Optional(t.Unknown()), // checked in the service, which names the field (rate_limits.rpm) and coerces nothing
});

export const keysRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/keys", detail: { tags: ["keys"] } })
    // A key or a revocation is answered only once its commit is on disk (syncCommits).
    .post("", async ({ body }) => {
      const created = await createKey(ctx.db, body);
      await ctx.db.syncCommits();
      return created;
    }, { parse: jsonOnly, body: CreateKeyBody, detail: { summary: "Create an API key (secret shown once)" } })
    // OFFPEAK_ADMIN_KEY first (source "env"), then the database's keys (source "db").
    .get("", async () => ({ object: "list" as const, data: [...(ctx.config.adminKey ? [envAdminKeyView(ctx.config.adminKey)] : []), ...(await listKeys(ctx.db))] }), {
      detail: { summary: "List API keys (OFFPEAK_ADMIN_KEY too, as source \"env\")" },
    })
    .delete("/:id", async ({ params }) => {
      const revoked = await revokeKey(ctx.db, params.id);
      await ctx.db.syncCommits();
      return revoked;
    }, { detail: { summary: "Revoke an API key (not OFFPEAK_ADMIN_KEY's: 409)" } });

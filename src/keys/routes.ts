import { Elysia, t } from "elysia";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { createKey, listKeys, revokeKey } from "./service";

const CreateKeyBody = t.Object({
  name: t.String(),
  scopes: t.Optional(t.Nullable(t.Array(t.String()))),
  project: t.Optional(t.Nullable(t.String())),
  rate_limits: t.Optional(t.Unknown()), // checked in the service, which names the field (rate_limits.rpm) and coerces nothing
});

export const keysRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/keys", detail: { tags: ["keys"] } })
    .post("", ({ body }) => createKey(ctx.db, body), { parse: jsonOnly, body: CreateKeyBody, detail: { summary: "Create an API key (secret shown once)" } })
    .get("", () => ({ object: "list" as const, data: listKeys(ctx.db) }), { detail: { summary: "List API keys" } })
    .delete("/:id", ({ params }) => revokeKey(ctx.db, params.id), { detail: { summary: "Revoke an API key" } });

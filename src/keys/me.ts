// GET /me: what the calling key is — its id, project and scopes — so that a
// client (the web console, docs/CONTRACT.md §15) offers only what the key may do.
//
// Any valid key may ask (routeScopes.ts gives "me" no scope), and it learns
// nothing it could not learn by trying: probing instead would mean sending
// writes (POST /files, POST /batches) to see whether they answer 403 or 400,
// which is noise in the request log, depends on authentication running
// before validation, and says nothing about `admin` without touching /keys.
import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";

const Me = t.Object({
  object: t.Literal("api_key"),
  id: t.String({ description: "The key's id (key_…); key_env_admin for OFFPEAK_ADMIN_KEY" }),
  project: t.String(),
  scopes: t.Array(t.String(), { description: "files:read, files:write, batches:read, batches:write, inference, admin (admin grants everything)" }),
});

export const meRoutes = () =>
  new Elysia().get(
    "/me",
    ({ request }) => {
      const p = principalOf(request);
      return { object: "api_key" as const, id: p.keyId, project: p.project, scopes: [...p.scopes] };
    },
    { response: Me, detail: { tags: ["keys"], summary: "The calling key: id, project and scopes (any valid key)" } },
  );

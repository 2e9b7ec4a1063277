import { Elysia } from "elysia";
import type { AppContext } from "../context";
import { pathOf } from "../http/path";
import { ApiError } from "../errors";
import type { ModelEntry } from "../inference/registry";

const modelView = (m: ModelEntry) => ({ id: m.id, object: "model" as const, created: m.created, owned_by: m.ownedBy });

/**
 * The model id of GET /models/{id}: everything after "/models/" in the raw
 * path, percent-decoded once. Read from the URL rather than from route
 * params so the "/:id" and "/*" routes below see the same id (Elysia's
 * ":id" would drop a trailing "/", the wildcard keeps it).
 */
function modelIdOf(url: string): string {
  const path = pathOf(url);
  return decodeURIComponent(path.slice(path.indexOf("/models/") + "/models/".length));
}

export const modelsRoutes = (ctx: AppContext) => {
  const retrieve = ({ request }: { request: Request }) => {
    const id = modelIdOf(request.url);
    const m = ctx.registry.get(id);
    if (!m) throw new ApiError("model_not_found", `The model '${id.slice(0, 200)}' does not exist`, { param: "model" });
    return modelView(m);
  };
  return (
    new Elysia({ prefix: "/models", detail: { tags: ["inference"] } })
      .get("", () => ({ object: "list" as const, data: ctx.registry.list().map(modelView) }), { detail: { summary: "List models" } })
      // Ids without "/" (and with it percent-encoded as %2F); this is the
      // route the OpenAPI document lists, as the generator drops wildcards.
      .get("/:id", retrieve, {
        detail: { summary: "Retrieve a model", description: 'Model ids may contain "/" (e.g. meta-llama/Llama-3.1-8B), sent as is or as %2F.' },
      })
      // Model ids may contain "/" (e.g. meta-llama/Llama-3.1-8B), hence the wildcard.
      .get("/*", retrieve, { detail: { hide: true } })
  );
};

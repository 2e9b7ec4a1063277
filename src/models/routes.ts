import { Elysia } from "elysia";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import type { ModelEntry } from "../inference/registry";

const modelView = (m: ModelEntry) => ({ id: m.id, object: "model" as const, created: m.created, owned_by: m.ownedBy });

export const modelsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/models", detail: { tags: ["inference"] } })
    .get("", () => ({ object: "list" as const, data: ctx.registry.list().map(modelView) }), { detail: { summary: "List models" } })
    // Model ids may contain "/" (e.g. meta-llama/Llama-3.1-8B), hence the wildcard.
    .get(
      "/*",
      ({ params }) => {
        const id = decodeURIComponent(params["*"]);
        const m = ctx.registry.get(id);
        if (!m) throw new ApiError("model_not_found", `The model '${id.slice(0, 200)}' does not exist`, { param: "model" });
        return modelView(m);
      },
      { detail: { summary: "Retrieve a model" } },
    );

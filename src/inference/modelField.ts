// The one field every inference body must have. Apart from admission
// (./admission/admit.ts), which front threads (src/http/front) do not load.
import { ApiError } from "../errors";

/**
 * Runs before the schema (a transform hook), whose generic answer to a
 * missing model is invalid_value: an absent (or null, docs/CONTRACT.md §1) model is
 * missing_field, as the error table says. Used by every inference route that takes a body.
 */
export function requireModel({ body }: { body: unknown }): void {
  if (body && typeof body === "object" && !Array.isArray(body) && (body as { model?: unknown }).model == null)
    throw new ApiError("missing_field", "model is required", { param: "model" });
}

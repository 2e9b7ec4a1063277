// What every interactive inference request goes through before it runs:
// the model must exist and serve this kind of request, the key's rate limit
// must admit it, and the model's scheduler must give it a slot (or 529).
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import type { ModelEntry } from "./registry";
import type { Release } from "./scheduler";

export type ModelUse = "chat" | "embeddings";

export function resolveModel(ctx: AppContext, id: unknown, use: ModelUse): ModelEntry {
  if (typeof id !== "string" || id.length === 0) throw new ApiError("missing_field", "model is required", { param: "model" });
  const model = ctx.registry.get(id);
  const fits = model && (model.kind === "upstream" || (use === "chat" ? model.kind === "echo" : model.kind === "embed"));
  if (!model || !fits) throw new ApiError("model_not_found", `The model '${id.slice(0, 200)}' does not exist or does not serve ${use}`, { param: "model" });
  return model;
}

export interface Admitted {
  /** x-ratelimit-* headers for the response. */
  headers: Record<string, string>;
  release: Release;
  /** Whether completion tokens count against a tpm limit (else the answer need not be read for usage). */
  metersTokens: boolean;
}

export async function admit(ctx: AppContext, principal: Principal, model: ModelEntry, promptTokens: number, signal: AbortSignal): Promise<Admitted> {
  const limits = { rpm: principal.rpm ?? ctx.config.defaultRpm, tpm: principal.tpm ?? ctx.config.defaultTpm };
  const admittedAt = Date.now();
  const headers = ctx.rateLimiter.admit(principal.keyId, limits, promptTokens, admittedAt);
  try {
    const release = await ctx.scheduler.acquireInteractive(model, signal);
    return { headers, release, metersTokens: limits.tpm !== null };
  } catch (e) {
    // The request never ran (529, or the client left the queue): it costs no
    // quota, or clients retrying a busy model would use up their rpm on 529s.
    const refunded = ctx.rateLimiter.refund(principal.keyId, limits, promptTokens, admittedAt);
    if (e instanceof ApiError) Object.assign(e.headers, refunded ?? headers);
    throw e;
  }
}

// What every interactive inference request goes through before it runs:
// the model must exist and serve this kind of request, the key's rate limit
// must admit it, and the model's scheduler must give it a slot (or 529).
import type { Principal } from "../../auth/verify";
import type { AppContext } from "../../context";
import { ApiError } from "../../errors";
import { serves, type EndpointKind } from "../../endpoints/kind";
import type { ModelEntry } from "../registry";
import type { Release } from "./scheduler";

/** The model a request names, if it exists and answers this endpoint kind (its module says which do). */
export function resolveModel(ctx: AppContext, id: unknown, kind: EndpointKind): ModelEntry {
  if (typeof id !== "string" || id.length === 0) throw new ApiError("missing_field", "model is required", { param: "model" });
  const model = ctx.registry.get(id);
  if (!model || !serves(kind, model.kind)) throw new ApiError("model_not_found", `The model '${id.slice(0, 200)}' does not exist or does not serve ${kind.noun}`, { param: "model" });
  // An upstream with api "anthropic" serves Anthropic's Messages API only (docs/CONTRACT.md §22): nothing is translated towards it.
  if (model.api === "anthropic" && kind.path !== "/messages")
    throw new ApiError("invalid_value", `The model '${id.slice(0, 200)}' is served by upstream ${model.upstreamName}, which speaks Anthropic's Messages API (api: "anthropic"): send it POST /v1/messages, not ${kind.noun} requests`, { param: "model" });
  return model;
}

export interface Admitted {
  /** x-ratelimit-* headers for the response. */
  headers: Record<string, string>;
  release: Release;
  /** Whether completion tokens count against a tpm limit (else the answer need not be read for usage). */
  metersTokens: boolean;
}

/**
 * Admitted at once when the key's rate limit has budget in hand and the
 * model has a free slot (no promise on the hot path), else when a cluster
 * node has taken budget from the database (src/inference/admission/clusterBudget.ts)
 * and the queue gives a slot.
 */
export function admit(ctx: AppContext, principal: Principal, model: ModelEntry, promptTokens: number, clientSignal: () => AbortSignal): Admitted | Promise<Admitted> {
  const limits = limitsOf(ctx, principal);
  const admittedAt = Date.now();
  const rated = ctx.rateLimiter.admit(principal.keyId, limits, promptTokens, admittedAt);
  if (rated instanceof Promise) return rated.then((headers) => slotFor(ctx, principal, model, limits, promptTokens, admittedAt, headers, clientSignal));
  return slotFor(ctx, principal, model, limits, promptTokens, admittedAt, rated, clientSignal);
}

function slotFor(
  ctx: AppContext,
  principal: Principal,
  model: ModelEntry,
  limits: ReturnType<typeof limitsOf>,
  promptTokens: number,
  admittedAt: number,
  headers: Record<string, string>,
  clientSignal: () => AbortSignal,
): Admitted | Promise<Admitted> {
  const metersTokens = limits.tpm !== null;
  const now = ctx.scheduler.tryInteractive(model);
  if (now) return { headers, release: now, metersTokens };
  return ctx.scheduler.acquireInteractive(model, clientSignal).then(
    (release) => ({ headers, release, metersTokens }),
    (e: unknown) => {
      throw notRun(ctx, principal.keyId, limits, promptTokens, admittedAt, headers, e);
    },
  );
}

/**
 * `admit` in two steps, for a caller that must answer before a queued
 * request gets its slot (a chat-session stream sends keep-alives while it
 * waits): the rate limits are checked first (a 429 at once; on a cluster
 * node with no budget in hand, once it has asked the database), the
 * model's slot comes later (a full queue rejects it at once: 529).
 */
export function admitInSteps(
  ctx: AppContext,
  principal: Principal,
  model: ModelEntry,
  promptTokens: number,
  clientSignal: () => AbortSignal,
): InSteps | Promise<InSteps> {
  const limits = limitsOf(ctx, principal);
  const admittedAt = Date.now();
  const then = (headers: Record<string, string>): InSteps => {
    const slot = ctx.scheduler.acquireInteractive(model, clientSignal).catch((e: unknown) => {
      throw notRun(ctx, principal.keyId, limits, promptTokens, admittedAt, headers, e);
    });
    return { headers, slot, metersTokens: limits.tpm !== null };
  };
  const rated = ctx.rateLimiter.admit(principal.keyId, limits, promptTokens, admittedAt);
  return rated instanceof Promise ? rated.then(then) : then(rated);
}

type InSteps = Omit<Admitted, "release"> & { slot: Promise<Release> };

/**
 * x-ratelimit-* headers for an inference answer that was refused before
 * admission (a bad request, an unknown model): docs/CONTRACT.md §7 puts them on every
 * inference response; such a request costs no quota, so nothing is counted.
 */
export function rateLimitHeadersNow(ctx: AppContext, principal: Principal): Record<string, string> {
  return ctx.rateLimiter.current(principal.keyId, limitsOf(ctx, principal));
}

const limitsOf = (ctx: AppContext, principal: Principal) => ({ rpm: principal.rpm ?? ctx.config.defaultRpm, tpm: principal.tpm ?? ctx.config.defaultTpm });

/**
 * The request never ran (529, or the client left the queue): it costs no
 * quota, or clients retrying a busy model would use up their rpm on 529s.
 * Returns the error to throw, with the rate-limit headers on it.
 */
function notRun(
  ctx: AppContext,
  keyId: string,
  limits: ReturnType<typeof limitsOf>,
  promptTokens: number,
  admittedAt: number,
  headers: Record<string, string>,
  e: unknown,
): unknown {
  const refunded = ctx.rateLimiter.refund(keyId, limits, promptTokens, admittedAt);
  if (e instanceof ApiError) Object.assign(e.headers, refunded ?? headers);
  return e;
}

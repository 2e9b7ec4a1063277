// Webhook endpoints (docs/CONTRACT.md §12): admin-only, per project. `admin` is a global
// role (as for keys): an admin key sees and removes every project's endpoints.
import { and, desc, eq, lt } from "drizzle-orm";
import type { AppContext } from "../context";
import type { WebhookEndpointRow } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { isId, newId, nowSeconds } from "../ids";
import { checkTarget, egressPolicy, hostKey } from "./egress";
import { BATCH_EVENT_TYPES } from "./outbox";
import { newSecret } from "./sign";

const PROJECT_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
const MAX_URL_CHARS = 2048;

type EndpointRow = WebhookEndpointRow;

export function endpointView(row: EndpointRow) {
  return { id: row.id, object: "webhook_endpoint" as const, url: row.url, events: row.events, project: row.project, created_at: row.createdAt };
}

export interface CreateEndpointInput {
  url: unknown;
  events?: unknown;
  project?: unknown;
}

export async function createEndpoint(ctx: AppContext, callerProject: string, input: CreateEndpointInput) {
  const url = checkUrl(input.url);
  let events: string[] = [...BATCH_EVENT_TYPES];
  if (input.events !== undefined && input.events !== null) {
    if (!Array.isArray(input.events) || input.events.length === 0 || !input.events.every((e) => typeof e === "string"))
      throw new ApiError("invalid_value", "events must be a non-empty array of event types", { param: "events" });
    for (const e of input.events)
      if (!(BATCH_EVENT_TYPES as readonly string[]).includes(e)) throw new ApiError("invalid_value", `events: unknown event type '${String(e).slice(0, 80)}'; known: ${BATCH_EVENT_TYPES.join(", ")}`, { param: "events" });
    events = [...new Set(input.events as string[])];
  }
  let project = callerProject;
  if (input.project !== undefined && input.project !== null) {
    if (typeof input.project !== "string" || !PROJECT_PATTERN.test(input.project))
      throw new ApiError("invalid_value", "project must be 1..64 characters of A-Z a-z 0-9 . _ -", { param: "project" });
    project = input.project;
  }
  // Last: the one check that may wait for DNS.
  await checkReachable(ctx, url);
  const row: EndpointRow = { seq: undefined as unknown as number, id: newId("whep_"), project, url, events, secret: newSecret(), createdAt: nowSeconds() };
  const { seq: _seq, ...values } = row;
  await ctx.db.insert(ctx.db.t.webhookEndpoints).values(values);
  // The secret appears only in this answer.
  return { ...endpointView(row), secret: row.secret };
}

function checkUrl(raw: unknown): string {
  if (typeof raw !== "string" || raw.length === 0) throw new ApiError("missing_field", "url is required", { param: "url" });
  if (raw.length > MAX_URL_CHARS) throw new ApiError("invalid_value", `url is longer than ${MAX_URL_CHARS} characters`, { param: "url" });
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ApiError("invalid_value", "url is not a valid URL", { param: "url" });
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new ApiError("invalid_value", "url must be http or https", { param: "url" });
  if (u.username || u.password) throw new ApiError("invalid_value", "url must not carry credentials", { param: "url" });
  return u.toString();
}

/** How long creation waits for DNS before it lets the name through to the per-delivery check. */
const CREATE_LOOKUP_MS = 5000;

/**
 * docs/CONTRACT.md §16: a URL whose host is, or resolves to, an internal address is
 * refused unless webhooks.allowed_hosts opens it. A name that does not
 * resolve (yet) is accepted: every delivery checks again, and dials only
 * what it checked (./post.ts).
 */
async function checkReachable(ctx: AppContext, url: string): Promise<void> {
  const host = new URL(url).hostname;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const giveUp = new Promise<null>((r) => (timer = setTimeout(() => r(null), CREATE_LOOKUP_MS)));
  const verdict = await Promise.race([checkTarget(host, egressPolicy(ctx.config.webhookAllowedHosts)), giveUp]).finally(() => clearTimeout(timer));
  if (verdict && !verdict.ok && verdict.reason === "not_allowed") {
    const how = hostKey(host) === verdict.address ? "is" : "resolves to";
    throw new ApiError("webhook_url_not_allowed", `url's host ${how} a ${verdict.class} address; internal receivers must be opened by the operator with webhooks.allowed_hosts`, {
      param: "url",
    });
  }
}

export async function listEndpoints(ctx: AppContext, project: string | undefined) {
  const { webhookEndpoints } = ctx.db.t;
  const rows = await ctx.db
    .select()
    .from(webhookEndpoints)
    .where(project ? eq(webhookEndpoints.project, project) : undefined)
    .orderBy(desc(webhookEndpoints.seq));
  return { object: "list" as const, data: rows.map(endpointView) };
}

async function getEndpoint(ctx: AppContext, id: string): Promise<EndpointRow> {
  if (!isId("whep_", id)) throw notFound("webhook_endpoint", id);
  const { webhookEndpoints } = ctx.db.t;
  const [row] = await ctx.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id));
  if (!row) throw notFound("webhook_endpoint", id);
  return row;
}

export async function deleteEndpoint(ctx: AppContext, id: string) {
  const row = await getEndpoint(ctx, id);
  const { webhookAttempts, webhookEndpoints, webhookEvents } = ctx.db.t;
  await ctx.db.transaction(async (tx) => {
    await tx.delete(webhookEndpoints).where(eq(webhookEndpoints.id, row.id));
    // Its undelivered events go with it; the attempts stay readable nowhere, so they go too.
    await tx.delete(webhookEvents).where(eq(webhookEvents.endpointId, row.id));
    await tx.delete(webhookAttempts).where(eq(webhookAttempts.endpointId, row.id));
  });
  return { id: row.id, object: "webhook_endpoint" as const, deleted: true as const };
}

/** Delivery attempts, newest first; `after`: the seq cursor is internal, so pages go by `limit` only. */
export async function listDeliveries(ctx: AppContext, id: string, limit: number, before?: number) {
  const row = await getEndpoint(ctx, id);
  const { webhookAttempts } = ctx.db.t;
  const conds = [eq(webhookAttempts.endpointId, row.id)];
  if (before !== undefined) conds.push(lt(webhookAttempts.seq, before));
  const rows = await ctx.db
    .select()
    .from(webhookAttempts)
    .where(and(...conds))
    .orderBy(desc(webhookAttempts.seq))
    .limit(limit + 1);
  const page = rows.slice(0, limit);
  return {
    object: "list" as const,
    data: page.map((a) => ({ event_id: a.eventId, type: a.type, attempt: a.attempt, status_code: a.statusCode ?? null, error: a.error ?? null, created_at: a.createdAt })),
    has_more: rows.length > limit,
  };
}

import { accessSync, constants } from "node:fs";
import { Elysia } from "elysia";
import { and, eq, sql } from "drizzle-orm";
import pkg from "../../package.json";
import { principalOf } from "../auth/plugin";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { peakNow } from "../scheduling/order";

/** How old an upstream health check may be when GET /status answers, and how long a fresh one may take. */
const HEALTH_MAX_AGE_MS = 1_000;
const HEALTH_TIMEOUT_MS = 3_000;

/**
 * What a key sees (docs/CONTRACT.md §16): an admin key, everything; any other key, its
 * own project's batch counts, and nothing that tells about the machines or
 * the network behind offpeak: no node ids (they carry host names and pids),
 * no upstream URLs, and no upstream error texts (they quote addresses,
 * ports and what the engine said). Health stays visible to every key: it is
 * what a client needs to know whether to wait.
 */
export async function statusReport(ctx: AppContext, who: Pick<Principal, "project" | "scopes">) {
  const admin = who.scopes.includes("admin");
  await ctx.registry.refreshHealth(HEALTH_MAX_AGE_MS, HEALTH_TIMEOUT_MS);
  let dbOk = true;
  let counts = { validating: 0, in_progress: 0, finalizing: 0 };
  try {
    const { batches } = ctx.db.t;
    for (const r of await ctx.db
      .select({ status: batches.status, n: ctx.db.sql.count() })
      .from(batches)
      .where(and(sql`${batches.status} IN ('validating','in_progress','finalizing')`, admin ? undefined : eq(batches.project, who.project)))
      .groupBy(batches.status))
      counts = { ...counts, [r.status]: r.n };
  } catch {
    dbOk = false;
  }
  const free = ctx.store.freeBytes();
  // The disk has room information; a bucket answers a listing.
  let storageOk = await ctx.store.probe();
  try {
    accessSync(ctx.config.dataDir, constants.W_OK);
  } catch {
    storageOk = false;
  }
  const models = ctx.registry.list().map((m) => {
    const s = ctx.scheduler.stats(m.id);
    return { id: m.id, owned_by: m.ownedBy, healthy: m.healthy, in_flight: s.inFlight, queued: s.queued };
  });
  // Upstreams are checked as well as models: one that discovers its models
  // and has been down since start has no model to report unhealthy (docs/CONTRACT.md §11).
  const upstreams = ctx.registry.health.report();
  const nodes = dbOk && admin ? await ctx.members?.report().catch(() => null) : null;
  const ok = dbOk && storageOk && models.every((m) => m.healthy) && upstreams.every((u) => u.healthy);
  return {
    status: ok ? ("ok" as const) : ("degraded" as const),
    version: pkg.version,
    uptime_s: Math.floor((Date.now() - ctx.startedAt) / 1000),
    database: { ok: dbOk, kind: ctx.db.engine },
    storage: { ok: storageOk, free_bytes: free },
    batches: counts,
    // docs/CONTRACT.md §18 off-peak hours: whether it is peak now, and the share of a model's concurrency batches with a window of 24h or more get now.
    peak_hours: ((p) => ({ peak: p.peak, peak_share_now: p.share }))(peakNow(ctx.config.batches)),
    models,
    // Upstream names are the operator's labels, already public as models' owned_by.
    upstreams: admin ? upstreams : upstreams.map(({ name, healthy, since }) => ({ name, healthy, since })),
    // The nodes on this database (docs/CONTRACT.md §14): live ones and those stopped in the last 10 minutes.
    ...(admin ? { nodes: nodes ?? [] } : {}),
  };
}

/** Any valid key may read the status (no scope needed); what it shows depends on the key (statusReport). */
export const statusRoutes = (ctx: AppContext) => new Elysia().get("/status", ({ request }) => statusReport(ctx, principalOf(request)), { detail: { tags: ["status"], summary: "Service status" } });

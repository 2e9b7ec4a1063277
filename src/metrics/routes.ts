// GET /metrics (admin scope): Prometheus text format. Counters are kept as
// things happen; gauges that mirror state are read here, at scrape time, so
// they cost nothing between scrapes.
import { Elysia } from "elysia";
import pkg from "../../package.json";
import type { AppContext } from "../context";
import { m, registry } from "./index";
import { windowOf } from "../inference/upstream/health";
import { peakNow } from "../scheduling/order";
import { PROMETHEUS_CONTENT_TYPE } from "./registry";
import { listUpstreams } from "../upstreams/service";

const BATCH_STATUSES = ["validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled"];

export async function collectGauges(ctx: AppContext): Promise<void> {
  const { batches, files } = ctx.db.t;
  const byStatus = await ctx.db.select({ status: batches.status, n: ctx.db.sql.count() }).from(batches).groupBy(batches.status);
  const byPurpose = await ctx.db.select({ purpose: files.purpose, n: ctx.db.sql.count(), bytes: ctx.db.sql.sumNumber(files.bytes) }).from(files).groupBy(files.purpose);
  m.buildInfo.set([pkg.version], 1);

  m.batches.reset();
  for (const s of BATCH_STATUSES) m.batches.set([s], 0);
  for (const r of byStatus) m.batches.set([r.status], r.n);

  m.filesStored.reset();
  m.fileBytesStored.reset();
  for (const r of byPurpose) {
    m.filesStored.set([r.purpose], r.n);
    m.fileBytesStored.set([r.purpose], r.bytes);
  }

  const free = ctx.store.freeBytes();
  if (free !== null) m.storageFreeBytes.set([], free);

  const peak = peakNow(ctx.config.batches);
  m.peakHours.set([], peak.peak ? 1 : 0);
  m.batchShare.set([], peak.share);
  m.modelInFlight.reset();
  m.batchDispatchConcurrency.reset();
  m.modelQueueDepth.reset();
  m.modelHealthy.reset();
  m.modelConcurrencyLimit.reset();
  m.modelLatency.reset();
  m.modelLatencyFloor.reset();
  for (const model of ctx.registry.list()) {
    const s = ctx.scheduler.stats(model.id);
    const limit = ctx.scheduler.limitOf(model);
    if (limit !== null) m.modelConcurrencyLimit.set([model.id], limit);
    const auto = ctx.scheduler.adaptiveState(model.id);
    if (auto?.latencyMs != null) m.modelLatency.set([model.id], auto.latencyMs / 1000);
    if (auto?.floorMs != null) m.modelLatencyFloor.set([model.id], auto.floorMs / 1000);
    m.modelInFlight.set([model.id, "interactive"], s.inFlight - s.batchInFlight);
    m.modelInFlight.set([model.id, "batch"], s.batchInFlight);
    m.modelQueueDepth.set([model.id, "interactive"], s.queued);
    m.modelQueueDepth.set([model.id, "batch"], s.batchQueued);
    m.modelHealthy.set([model.id], model.healthy ? 1 : 0);
    if (model.kind === "upstream") m.batchDispatchConcurrency.set([model.id], s.batchInFlight);
  }
  m.upstreamUp.reset();
  m.upstreamBatchWindow.reset();
  ctx.registry.health.report().forEach((u, i) => {
    m.upstreamUp.set([u.name], u.healthy ? 1 : 0);
    const w = windowOf(ctx.registry.health.mem, i).window;
    if (w !== null) m.upstreamBatchWindow.set([u.name], w);
  });
  collectReplicas(ctx);
}

/**
 * Each replica as GET /upstreams shows it (docs/CONTRACT.md §21: the same
 * numbers): its counters are totals kept in the shared cells, copied here;
 * a replica that left the set leaves /metrics with it.
 */
function collectReplicas(ctx: AppContext): void {
  const series = [m.replicaInFlight, m.replicaRequests, m.replicaFailures, m.replicaConcurrencyLimit, m.replicaUp];
  for (const s of series) s.reset();
  if (!ctx.registry.replicas) return;
  for (const u of listUpstreams(ctx).data)
    for (const r of u.replicas) {
      const labels = [u.name, r.id];
      m.replicaInFlight.set(labels, r.in_flight);
      m.replicaRequests.setTotal(labels, r.requests);
      m.replicaFailures.setTotal(labels, r.failures);
      if (r.concurrency_limit !== null) m.replicaConcurrencyLimit.set(labels, r.concurrency_limit);
      m.replicaUp.set(labels, r.healthy ? 1 : 0);
    }
}

export const metricsRoutes = (ctx: AppContext) =>
  new Elysia().get(
    "/metrics",
    async () => {
      await collectGauges(ctx);
      return new Response(registry.render(), { headers: { "content-type": PROMETHEUS_CONTENT_TYPE } });
    },
    { detail: { tags: ["status"], summary: "Prometheus metrics (admin scope)" } },
  );

// The upstreams and their replicas at runtime (docs/CONTRACT.md §21), scope
// `admin`. A change is a row of upstream_replicas (added replicas, and the
// state set on any replica, a config one included); every node re-reads the
// table within a second (src/inference/replicas/set.ts), this one at once.
import { eq } from "drizzle-orm";
import type { AppContext } from "../context";
import type { UpstreamConfig } from "../config";
import { ApiError, invalid, notFound } from "../errors";
import { limitNow } from "../inference/replicas/cells";
import { replicaId } from "../inference/replicas/replicaId";
import type { ReplicaInfo, ReplicaSets } from "../inference/replicas/set";
import { isDown } from "../inference/upstream/health";

const MAX_URL_CHARS = 2048;
const MAX_WEIGHT = 1000;

function setsOf(ctx: AppContext): ReplicaSets {
  const sets = ctx.registry.replicas;
  if (!sets) throw new Error("the registry has no replica sets");
  return sets;
}

function upstreamNamed(ctx: AppContext, name: string): UpstreamConfig {
  const u = ctx.config.upstreams.find((x) => x.name === name);
  if (!u) throw notFound("upstream", name, "name");
  return u;
}

/** A replica as the API shows it. */
function replicaView(ctx: AppContext, u: UpstreamConfig, r: ReplicaInfo) {
  const down = r.counters.open || isDown(ctx.registry.health.mem, ctx.registry.health.indexOf(u));
  return {
    id: r.id,
    object: "upstream.replica" as const,
    base_url: r.base_url,
    weight: r.weight,
    state: r.state === "draining" || r.removed ? ("draining" as const) : down ? ("down" as const) : ("active" as const),
    source: r.source,
    in_flight: r.counters.inFlight,
    concurrency_limit: concurrencyLimitOf(ctx, u, r),
    healthy: !down,
    requests: r.counters.requests,
    failures: r.counters.failures,
    latency_ms: r.counters.answers > 0 ? Math.round(r.counters.heldMs / r.counters.answers) : null,
    /** Requests its engine reports running and waiting (vLLM, SGLang, llama.cpp /metrics; null: unknown or older than 5 s). */
    engine_load: setsOf(ctx).engineLoad(r.view.idx),
    /** How full its engine's KV cache is, 0–1 (null: unknown or older than 5 s): between equally loaded replicas the emptier cache is chosen. */
    engine_kv_cache: setsOf(ctx).engineKvCache(r.view.idx),
  };
}

/** Its own max_concurrency, else its share of its models' limit now (an adaptive one moves). */
function concurrencyLimitOf(ctx: AppContext, u: UpstreamConfig, r: ReplicaInfo): number | null {
  // Its own max_concurrency, or the limit its own controller found ("auto" with several replicas).
  const own = limitNow(setsOf(ctx).cells, r.view);
  if (own > 0) return own;
  const model = ctx.registry.list().find((m) => m.upstream === u.name && m.maxConcurrency !== null);
  if (!model) return null;
  const limit = ctx.scheduler.limitOf(model) ?? model.maxConcurrency!;
  const n = Math.max(1, setsOf(ctx).views(u.name).length);
  return Math.max(1, Math.round(limit / n));
}

function upstreamView(ctx: AppContext, u: UpstreamConfig) {
  return {
    name: u.name,
    object: "upstream" as const,
    engine: u.engine ?? null,
    models: ctx.registry
      .list()
      .filter((m) => m.upstream === u.name)
      .map((m) => m.id),
    replicas: setsOf(ctx)
      .list(u.name)
      .map((r) => replicaView(ctx, u, r)),
  };
}

export function listUpstreams(ctx: AppContext) {
  return { object: "list" as const, data: ctx.config.upstreams.map((u) => upstreamView(ctx, u)) };
}

function checkUrl(raw: unknown): string {
  if (typeof raw !== "string" || raw.length === 0) throw new ApiError("missing_field", "base_url is required", { param: "base_url" });
  if (raw.length > MAX_URL_CHARS) throw invalid("base_url", `base_url is longer than ${MAX_URL_CHARS} characters`);
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw invalid("base_url", "base_url is not a valid URL");
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw invalid("base_url", "base_url must be an http or https URL");
  if (u.username || u.password) throw invalid("base_url", "base_url must not hold credentials (the upstream's key is api_key_env)");
  if (u.search || u.hash) throw invalid("base_url", "base_url must not have a query or a fragment");
  return raw.replace(/\/+$/, "");
}

function checkWeight(raw: unknown): number {
  if (raw === undefined || raw === null) return 1;
  if (typeof raw !== "number" || !Number.isFinite(raw) || raw <= 0 || raw > MAX_WEIGHT) throw invalid("weight", `weight must be a number above 0 and at most ${MAX_WEIGHT}`);
  return raw;
}

export async function addReplica(ctx: AppContext, name: string, body: { base_url?: unknown; weight?: unknown }) {
  const u = upstreamNamed(ctx, name);
  const baseUrl = checkUrl(body.base_url);
  const weight = checkWeight(body.weight);
  const sets = setsOf(ctx);
  await sets.poll();
  if (sets.list(u.name).some((r) => r.base_url === baseUrl && !r.removed))
    throw new ApiError("replica_exists", `Upstream ${u.name} already has a replica at ${baseUrl}`, { param: "base_url" });
  const id = replicaId(u.name, baseUrl);
  // A config replica removed earlier and added again keeps its source: the row says "active" again.
  const source = u.replicas.some((r) => r.id === id) ? "config" : "api";
  await upsert(ctx, { id, upstream: u.name, baseUrl, weight, state: "active", source });
  await sets.poll();
  const shown = sets.list(u.name).find((r) => r.id === id)!;
  return replicaView(ctx, u, shown);
}

export async function setReplicaState(ctx: AppContext, name: string, id: string, body: { state?: unknown }) {
  const u = upstreamNamed(ctx, name);
  if (body.state !== "draining" && body.state !== "active") throw invalid("state", "state must be 'draining' or 'active'");
  const r = await listedReplica(ctx, u, id);
  await upsert(ctx, { id: r.id, upstream: u.name, baseUrl: r.base_url, weight: r.weight, state: body.state, source: r.source });
  const sets = setsOf(ctx);
  await sets.poll();
  return replicaView(ctx, u, sets.list(u.name).find((x) => x.id === id)!);
}

/** Drains, then is gone: it takes no new request, and leaves the listing once what it runs has finished. */
export async function removeReplica(ctx: AppContext, name: string, id: string) {
  const u = upstreamNamed(ctx, name);
  const r = await listedReplica(ctx, u, id);
  await upsert(ctx, { id: r.id, upstream: u.name, baseUrl: r.base_url, weight: r.weight, state: "removed", source: r.source });
  await setsOf(ctx).poll();
  return { id: r.id, object: "upstream.replica" as const, deleted: true };
}

async function listedReplica(ctx: AppContext, u: UpstreamConfig, id: string): Promise<ReplicaInfo> {
  const sets = setsOf(ctx);
  await sets.poll();
  const r = sets.list(u.name).find((x) => x.id === id && !x.removed);
  if (!r) throw notFound("replica", id, "id");
  return r;
}

async function upsert(ctx: AppContext, row: { id: string; upstream: string; baseUrl: string; weight: number; state: string; source: string }): Promise<void> {
  const t = ctx.db.t.upstreamReplicas;
  const values = { ...row, updatedAt: Date.now() };
  await ctx.db.transaction(async (tx) => {
    const [had] = await tx.select({ id: t.id }).from(t).where(eq(t.id, row.id));
    if (had) await tx.update(t).set(values).where(eq(t.id, row.id));
    else await tx.insert(t).values(values);
  });
  await ctx.db.syncCommits();
}

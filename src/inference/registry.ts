// The model registry: built-ins plus the models of configured upstreams.
// Shared by the interactive routes and the batch runner.
import { processEnv, type Config, type ModelConfig, type UpstreamApi, type UpstreamConfig } from "../config";
import type { Logger } from "../log";
import { ECHO_MODEL } from "./builtin/echo";
import { EMBED_MODEL } from "./builtin/embed";
import { getModels, ownClientFor } from "./upstream/transport";
import type { UpstreamMonitor } from "./upstream/monitor";
import type { ReplicaSets } from "./replicas/set";

export type ModelKind = "echo" | "embed" | "upstream";

/** What a batch Worker needs to run a model: plain data, safe to postMessage. */
export interface ModelSpec {
  id: string;
  kind: ModelKind;
  /** For upstream models. */
  baseUrl: string | null;
  apiKey: string | null;
  upstreamModel: string | null;
  timeoutMs: number;
  latencyMs: number;
  tokensPerSecond: number;
  /** The upstream's index in the health state (./upstream/health.ts); -1 for built-ins. */
  upstreamIdx: number;
  /** The upstream's name: its replica set (./replicas/set.ts) is found under it. Null for built-ins. */
  upstream: string | null;
  /** Sent as `priority` on this model's batch lines (docs/CONTRACT.md §21 batch_priority); null: not sent. */
  batchPriority: number | null;
  /**
   * Calls go through offpeak's own HTTP/1.1 client (./upstream/httpClient.ts)
   * rather than fetch: decided once (ownClientFor), for interactive calls
   * and batch lines alike. Absent: fetch.
   */
  ownClient?: boolean;
}

export interface ModelEntry extends ModelSpec {
  ownedBy: string;
  created: number;
  upstreamName: string | null;
  /** The API its upstream speaks (config `api`; built-ins: "openai"): "anthropic" serves only POST /messages (src/anthropic). */
  api: UpstreamApi;
  /**
   * Fixed: the limit. Adaptive: the most the controller may set (max_concurrency_limit). Null: unlimited.
   * With several replicas, each has the limit: the model's is their sum over the replicas taking work.
   */
  readonly maxConcurrency: number | null;
  /** max_concurrency "auto" (the default for upstream models): a controller finds the limit (./admission/adaptive.ts). */
  adaptive: boolean;
  queueSize: number;
  pricing: { inputPerMillion: number; outputPerMillion: number };
  /** False while the model's upstream is down (built-ins: always true). */
  readonly healthy: boolean;
  /** The health owner of the model's upstream (null for built-ins). */
  health: UpstreamMonitor | null;
  /** The replica sets its requests are dispatched over (null for built-ins, and for a registry built without them). */
  replicaSets: ReplicaSets | null;
  ownClient: boolean;
}

/** The most an "auto" model's controller may set unless max_concurrency_limit says otherwise. */
export const DEFAULT_CONCURRENCY_LIMIT = 256;

const CREATED = 1767225600; // 2026-01-01: a fixed date for the built-ins.

export class ModelRegistry {
  private readonly models = new Map<string, ModelEntry>();

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    /** The one owner of upstream health: models read it, discoveries report to it. */
    readonly health: UpstreamMonitor,
    /** Each upstream's engines; absent: each upstream is its base_url alone (tests of the registry by itself). */
    readonly replicas: ReplicaSets | null = null,
  ) {
    this.put(this.entry(ECHO_MODEL, "echo", "offpeak", null, null));
    this.put(this.entry(EMBED_MODEL, "embed", "offpeak", null, null));
    for (const u of config.upstreams) for (const m of u.models ?? []) this.put(this.entry(m, "upstream", u.name, u, u.model_map?.[m] ?? m));
  }

  private entry(id: string, kind: ModelKind, ownedBy: string, upstream: UpstreamConfig | null, upstreamModel: string | null): ModelEntry {
    const mc: ModelConfig = this.config.models[id] ?? {};
    const upstreamIdx = upstream ? this.health.indexOf(upstream) : -1;
    const health = this.health;
    // docs/CONTRACT.md §18: "auto" unless a number is configured. Built-ins stay
    // unlimited unless a number is configured: they answer in this process,
    // and "auto" has no engine to measure there.
    const configured = mc.max_concurrency ?? upstream?.max_concurrency ?? (kind === "upstream" ? "auto" : null);
    const concurrency = configured === "auto" && kind !== "upstream" ? null : configured;
    const adaptive = concurrency === "auto";
    const perReplica = adaptive ? (mc.max_concurrency_limit ?? upstream?.max_concurrency_limit ?? DEFAULT_CONCURRENCY_LIMIT) : (concurrency as number | null);
    const sets = this.replicas;
    return {
      id,
      kind,
      ownedBy,
      created: CREATED,
      upstreamName: upstream?.name ?? null,
      api: upstream?.api ?? "openai",
      baseUrl: upstream ? upstream.base_url.replace(/\/+$/, "") : null,
      apiKey: upstream?.api_key ?? null,
      upstreamModel,
      timeoutMs: (upstream?.timeout_s ?? 600) * 1000,
      latencyMs: mc.latency_ms ?? 0,
      tokensPerSecond: mc.tokens_per_second ?? 0,
      get maxConcurrency() {
        if (perReplica === null || !upstream || !sets) return perReplica;
        const views = sets.views(upstream.name);
        if (views.length <= 1) return perReplica;
        let sum = 0;
        for (const v of views) sum += adaptive || v.limit === 0 ? perReplica : v.limit;
        return sum;
      },
      adaptive,
      queueSize: mc.queue_size ?? upstream?.queue_size ?? 256,
      pricing: { inputPerMillion: mc.pricing?.input_per_million ?? 0, outputPerMillion: mc.pricing?.output_per_million ?? 0 },
      upstreamIdx,
      upstream: upstream?.name ?? null,
      batchPriority: upstream?.batch_priority ?? null,
      health: upstream ? health : null,
      replicaSets: upstream ? sets : null,
      ownClient: upstream !== null && ownClientFor(upstream.base_url, this.config.upstreamClient, processEnv()),
      get healthy() {
        return !health.isDown(upstreamIdx);
      },
    };
  }

  private put(e: ModelEntry): void {
    this.models.set(e.id, e);
  }

  get(id: string): ModelEntry | undefined {
    return this.models.get(id);
  }

  list(): ModelEntry[] {
    return [...this.models.values()];
  }

  specs(): ModelSpec[] {
    return this.list().map(({ id, kind, baseUrl, apiKey, upstreamModel, timeoutMs, latencyMs, tokensPerSecond, upstreamIdx, upstream, batchPriority, ownClient }) => ({
      id,
      kind,
      baseUrl,
      apiKey,
      upstreamModel,
      timeoutMs,
      latencyMs,
      tokensPerSecond,
      upstreamIdx,
      upstream,
      batchPriority,
      ownClient,
    }));
  }

  private lastDiscovery = 0;
  private discovering: Promise<void> | null = null;

  /** True when no upstream is down (docs/CONTRACT.md §11: status "degraded" while one is). */
  upstreamsHealthy(): boolean {
    return this.health.allUp();
  }

  /**
   * Re-checks upstream health if the last check is older than `maxAgeMs`
   * (concurrent callers share one check). GET /status uses it: the 60 s
   * background sweep alone would report an upstream that went down as
   * healthy (status "ok") for up to a minute (docs/CONTRACT.md §8: degraded when a
   * dependency check fails).
   */
  refreshHealth(maxAgeMs: number, timeoutMs: number): Promise<void> {
    if (this.config.upstreams.length === 0 || Date.now() - this.lastDiscovery < maxAgeMs) return Promise.resolve();
    return (this.discovering ??= this.discover(timeoutMs).finally(() => (this.discovering = null)));
  }

  /**
   * Reads every upstream's `GET /models`: the model list of upstreams that
   * name none in config, and a health check of all of them (a failure turns
   * the upstream down; an answer brings it up).
   */
  async discover(timeoutMs = 10_000): Promise<void> {
    this.lastDiscovery = Date.now();
    await Promise.all(
      this.config.upstreams.map(async (u) => {
        // The upstream answers when any of its replicas does (docs/CONTRACT.md §21): tried in turn.
        const urls = this.replicas?.urlsOf(u.name) ?? [u.base_url];
        let answer = await getModels(urls[0]!, u.api_key ?? null, timeoutMs);
        for (let i = 1; i < urls.length && !answer.ok; i++) answer = await getModels(urls[i]!, u.api_key ?? null, timeoutMs);
        const error = answer.ok ? (answer.ids ? null : "GET /models answered with a body that is not a model list") : answer.error;
        if (answer.ok && answer.ids && !u.models)
          for (const id of answer.ids) if (!this.models.has(id)) this.put(this.entry(id, "upstream", u.name, u, u.model_map?.[id] ?? id));
        if (error) this.log.warn("upstream model discovery failed", { upstream: u.name, error });
        this.health.discovered(this.health.indexOf(u), error === null, error);
      }),
    );
  }
}

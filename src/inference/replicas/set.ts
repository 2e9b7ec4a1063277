// The replica sets of the upstreams (docs/CONTRACT.md §21), on the main
// thread: the replicas of the config, those added through the API, and the
// state an operator gave any of them (draining, removed), kept in the
// database table upstream_replicas. Every node reads that table every
// POLL_MS, so a change made on one is obeyed by all within a second and
// survives restarts. Each change is published (onChange) to the batch
// Workers as one plain snapshot.
//
// Also the recovery of replicas whose breaker is open (./cells.ts): a
// Worker or this thread opens it after failures in a row; this thread
// probes the replica (`GET {base_url}/models`) until it answers, then
// closes it: a replica that comes back is used again by itself.
import type { ReplicaConfig, UpstreamConfig } from "../../config";
import { processEnv } from "../../config";
import type { Db } from "../../db/client";
import type { ReplicaRow } from "../../db/schema";
import type { Logger } from "../../log";
import { getModels, ownClientFor, type UpstreamClientSetting } from "../upstream/transport";
// A replica is probed as an upstream is (../upstream/monitor.ts): the same backoff.
import { PROBE_FIRST_MS, PROBE_MAX_MS, PROBE_REFUSED_MS, PROBE_TIMEOUT_MS } from "../upstream/monitor";
import { MAX_REPLICAS, close, countersOf, engineLoadOf, isOpen, kvCacheOf, newEngineTimes, newReplicaCells, open, setEngineLoad, type ReplicaCounters } from "./cells";
import { ENGINE_EVERY_MS, publishesLoad, readEngineLoad } from "./engineLoad";
import { seedOf, type ReplicaView } from "./pick";
import { replicaId } from "./replicaId";
import { lookup } from "node:dns/promises";

export type ReplicaState = "active" | "draining";
export type ReplicaSource = "config" | "api" | "dns";

/** A replica as the API shows it (GET /upstreams). */
export interface ReplicaInfo {
  id: string;
  base_url: string;
  weight: number;
  /** active, draining, or down (its breaker open, or its upstream down). */
  state: ReplicaState;
  source: ReplicaSource;
  /** Still listed while a removed replica finishes what it runs. */
  removed: boolean;
  view: ReplicaView;
  counters: ReplicaCounters;
}

/** How often a `resolve: "dns"` replica's host is looked up again. */
export const DNS_EVERY_MS = 10_000;

/** The replica URL once per address its host resolves to (sorted, so that a lookup in another order changes nothing). */
async function resolvedUrls(baseUrl: string): Promise<string[]> {
  const url = new URL(baseUrl);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const addresses = await lookup(host, { all: true });
  const urls = new Set<string>();
  for (const a of addresses) {
    const u = new URL(baseUrl);
    u.hostname = a.family === 6 ? `[${a.address}]` : a.address;
    urls.add(u.toString().replace(/\/+$/, ""));
  }
  return [...urls].sort();
}

/** What every node re-reads: at most this long until a change made elsewhere is obeyed. */
export const POLL_MS = 500;

interface Known {
  upstream: string;
  view: ReplicaView;
  state: ReplicaState;
  source: ReplicaSource;
  removed: boolean;
  probing: boolean;
  /** Its engine's /metrics is being read. */
  reading: boolean;
  nextProbeAt: number;
  probeDelay: number;
}

export class ReplicaSets {
  readonly cells = newReplicaCells();
  /** When each replica's engine load was read (./engineLoad.ts). */
  readonly times = newEngineTimes();
  private engineTimer: ReturnType<typeof setInterval> | null = null;
  /** Every replica seen while this process runs, by id (indexes into the cells are never reused). */
  private readonly known = new Map<string, Known>();
  /** Per upstream, in order: the replicas listed now (removed ones that still run requests included). */
  private listed = new Map<string, Known[]>();
  /** Per upstream: the replicas taking new requests. */
  private active = new Map<string, ReplicaView[]>();
  private readonly listeners: (() => void)[] = [];
  private lastRows = "";
  private rows: ReplicaRow[] = [];
  /** Per config replica with `resolve: "dns"`: the URLs of the addresses its host resolved to last. */
  private readonly resolved = new Map<string, string[]>();
  private dnsTimer: ReturnType<typeof setInterval> | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private polling = false;

  constructor(
    private readonly upstreams: readonly UpstreamConfig[],
    private readonly db: Db | null,
    private readonly client: UpstreamClientSetting,
    private readonly log: Logger,
  ) {
    this.apply([]);
  }

  /** Reads the table now, then every POLL_MS; probes open replicas. */
  async start(): Promise<void> {
    if (this.upstreams.some((u) => u.replicas.some((r) => r.resolve === "dns"))) {
      await this.resolveAll();
      this.dnsTimer = setInterval(() => void this.resolveAll(), DNS_EVERY_MS);
      this.dnsTimer.unref?.();
    }
    await this.poll();
    if (this.upstreams.some((u) => publishesLoad(u.engine))) {
      this.engineTimer = setInterval(() => this.readEngines(), ENGINE_EVERY_MS);
      this.engineTimer.unref?.();
    }
    this.timer = setInterval(() => {
      void this.poll();
      this.probeOpen();
    }, POLL_MS);
    this.timer.unref?.();
  }

  stop(): void {
    if (this.engineTimer) clearInterval(this.engineTimer);
    if (this.dnsTimer) clearInterval(this.dnsTimer);
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** The replicas of `upstream` that take new requests. */
  views(upstream: string): readonly ReplicaView[] {
    return this.active.get(upstream) ?? [];
  }

  /** Every upstream's active replicas: what the batch Workers get. */
  snapshot(): Record<string, ReplicaView[]> {
    return Object.fromEntries(this.active);
  }

  /** The replicas of `upstream` as listed now, with their counters. */
  list(upstream: string): ReplicaInfo[] {
    return (this.listed.get(upstream) ?? []).map((k) => ({
      id: k.view.id,
      base_url: k.view.baseUrl,
      weight: k.view.weight,
      state: k.state,
      source: k.source,
      removed: k.removed,
      view: k.view,
      counters: countersOf(this.cells, k.view.idx),
    }));
  }

  /** The URLs to probe for the upstream as a whole: it is up when any replica answers. */
  urlsOf(upstream: string): string[] {
    const listed = (this.listed.get(upstream) ?? []).filter((k) => !k.removed);
    const urls = listed.map((k) => k.view.baseUrl);
    return urls.length > 0 ? urls : [this.upstreams.find((u) => u.name === upstream)!.base_url];
  }

  /** Re-reads the table (also right after this node changed it). */
  async poll(): Promise<void> {
    if (!this.db || this.polling) return;
    this.polling = true;
    try {
      const t = this.db.t.upstreamReplicas;
      const rows = (await this.db.select().from(t)) as ReplicaRow[];
      const key = JSON.stringify(rows.map((r) => [r.id, r.state, r.weight, r.baseUrl, r.updatedAt]).sort());
      if (key !== this.lastRows) {
        this.lastRows = key;
        this.rows = rows;
        this.apply(rows);
      }
    } catch (e) {
      // The database away: the last set stands; the next poll tries again.
      this.log.debug("replica set poll failed", { error: String(e) });
    } finally {
      this.polling = false;
    }
    this.forgetDrained();
  }

  /** Reads the load each replica's engine reports (vLLM, SGLang, llama.cpp); a replica whose engine does not answer keeps no reading. */
  private readEngines(): void {
    for (const u of this.upstreams) {
      const engine = u.engine;
      if (!publishesLoad(engine)) continue;
      for (const k of this.listed.get(u.name) ?? []) {
        if (k.removed || k.reading) continue;
        k.reading = true;
        void readEngineLoad(engine, k.view.baseUrl, u.api_key)
          .then((r) => {
            if (r !== null) setEngineLoad(this.cells, this.times, k.view.idx, r.load, r.kvCache);
          })
          .finally(() => (k.reading = false));
      }
    }
  }

  /** How full a replica's engine said its KV cache is (0–1), or null (not said, or older than 5 s). */
  engineKvCache(idx: number): number | null {
    return kvCacheOf(this.cells, this.times, idx);
  }

  /** The load a replica's engine reported, or null (not read, or older than 5 s). */
  engineLoad(idx: number): number | null {
    const load = engineLoadOf(this.cells, this.times, idx);
    return load < 0 ? null : load;
  }

  /** Looks up the hosts of the replicas with `resolve: "dns"`; a change of addresses rebuilds the sets (a vanished one drains). */
  private async resolveAll(): Promise<void> {
    let changed = false;
    for (const u of this.upstreams)
      for (const r of u.replicas) {
        if (r.resolve !== "dns") continue;
        const urls = await resolvedUrls(r.base_url).catch((e) => {
          // A failed lookup keeps the last addresses: DNS trouble is not the engines'.
          this.log.warn("replica DNS lookup failed", { upstream: u.name, base_url: r.base_url, error: String(e) });
          return null;
        });
        if (urls === null) continue;
        const before = this.resolved.get(r.id) ?? [];
        if (urls.join() !== before.join()) {
          this.resolved.set(r.id, urls);
          changed = true;
        }
      }
    if (changed) this.apply(this.rows);
  }

  /** Builds the sets from the config and the table's rows; publishes a change. */
  private apply(rows: ReplicaRow[]): void {
    const byId = new Map(rows.map((r) => [r.id, r]));
    const listed = new Map<string, Known[]>();
    const active = new Map<string, ReplicaView[]>();
    for (const u of this.upstreams) {
      const list: Known[] = [];
      const fromConfig = (r: ReplicaConfig) => {
        const row = byId.get(r.id);
        const state = row?.state ?? "active";
        return this.knownOf(u, r.id, r.base_url, row?.weight ?? r.weight, limitOf(r, u), state, "config");
      };
      for (const r of u.replicas) {
        if (r.resolve !== "dns") {
          list.push(fromConfig(r));
          continue;
        }
        // One replica per address its host resolved to, named by upstream and address (the same on every node).
        for (const url of this.resolved.get(r.id) ?? []) {
          const id = replicaId(u.name, url);
          const row = byId.get(id);
          list.push(this.knownOf(u, id, url, row?.weight ?? r.weight, limitOf(r, u), row?.state ?? "active", "dns"));
        }
      }
      for (const row of rows) {
        if (row.upstream !== u.name || row.source === "config") continue;
        list.push(this.knownOf(u, row.id, row.baseUrl, row.weight, limitOf(null, u), row.state, row.source as ReplicaSource));
      }
      // A removed replica stays listed (not dispatched to) until it has nothing in flight.
      const shown = list.filter((k) => !k.removed || countersOf(this.cells, k.view.idx).inFlight > 0);
      listed.set(u.name, shown);
      active.set(
        u.name,
        list.filter((k) => !k.removed && k.state === "active").map((k) => k.view),
      );
    }
    const changed = JSON.stringify([...active]) !== JSON.stringify([...this.active]);
    this.listed = listed;
    this.active = active;
    if (changed) for (const f of this.listeners) f();
  }

  private knownOf(u: UpstreamConfig, id: string, baseUrl: string, weight: number, limit: number, state: string, source: ReplicaSource): Known {
    let k = this.known.get(id);
    if (!k) {
      if (this.known.size >= MAX_REPLICAS) throw new Error(`more than ${MAX_REPLICAS} replicas`);
      const idx = this.known.size;
      close(this.cells, idx);
      k = {
        upstream: u.name,
        view: { idx, id, baseUrl, weight, limit, seed: seedOf(id), ownClient: ownClientFor(baseUrl, this.client, processEnv()) },
        state: "active",
        source,
        removed: false,
        probing: false,
        reading: false,
        nextProbeAt: 0,
        probeDelay: PROBE_FIRST_MS,
      };
      this.known.set(id, k);
    }
    if (k.view.weight !== weight || k.view.limit !== limit) k.view = { ...k.view, weight, limit };
    k.state = state === "draining" ? "draining" : "active";
    k.removed = state === "removed";
    return k;
  }

  /** Removed replicas whose last request ended leave the listing. */
  private forgetDrained(): void {
    for (const [name, list] of this.listed) {
      const still = list.filter((k) => !k.removed || countersOf(this.cells, k.view.idx).inFlight > 0);
      if (still.length !== list.length) this.listed.set(name, still);
    }
  }

  /** Probes each replica whose breaker is open, with a backoff; an answer closes it. */
  private probeOpen(): void {
    const now = Date.now();
    for (const k of this.known.values()) {
      if (k.removed || k.probing || !isOpen(this.cells, k.view.idx) || now < k.nextProbeAt) continue;
      k.probing = true;
      const apiKey = this.upstreams.find((u) => u.name === k.upstream)?.api_key ?? null;
      void getModels(k.view.baseUrl, apiKey, PROBE_TIMEOUT_MS)
        .then((answer) => {
          if (answer.ok) {
            close(this.cells, k.view.idx);
            k.probeDelay = PROBE_FIRST_MS;
            this.log.info("replica up", { upstream: k.upstream, replica: k.view.id, base_url: k.view.baseUrl });
            return;
          }
          open(this.cells, k.view.idx);
          const refused = answer.fate.kind === "engine_failure" && answer.fate.cause === "refused";
          k.nextProbeAt = Date.now() + (refused ? PROBE_REFUSED_MS : k.probeDelay);
          if (!refused) k.probeDelay = Math.min(k.probeDelay * 2, PROBE_MAX_MS);
        })
        .finally(() => (k.probing = false));
    }
  }

  /** A replica's breaker opened (a Worker or this thread saw its failures): logged once, probed from the next sweep. */
  opened(idx: number): void {
    for (const k of this.known.values())
      if (k.view.idx === idx) {
        k.nextProbeAt = Date.now() + PROBE_FIRST_MS;
        this.log.warn("replica left out after failures in a row", { upstream: k.upstream, replica: k.view.id, base_url: k.view.baseUrl });
      }
  }
}

/** A replica's own limit: its max_concurrency, else its upstream's when that is a number; 0 (none of its own) for "auto". */
function limitOf(r: ReplicaConfig | null, u: UpstreamConfig): number {
  const m = r?.max_concurrency ?? u.max_concurrency;
  return typeof m === "number" ? m : 0;
}

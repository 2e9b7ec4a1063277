// The main thread's side of upstream health (./health.ts holds the shared
// state): it probes a suspect upstream at once and a down one until it
// answers, decides each change between up and down, logs and counts it, and
// reports the state to GET /status and /metrics. Interactive calls report
// their fates through it.
import type { UpstreamConfig } from "../../config";
import type { Logger } from "../../log";
import { m } from "../../metrics";
import { describe, type Fate } from "./fate";
import { DOWN, UP, isDown, markDown, markUp, newHealthMemory, reportFate, stateOf, type HealthMemory } from "./health";
import { getModels } from "./transport";

/** A probe that gets no connection at all (the engine restarting) costs the engine nothing: try every second. */
export const PROBE_REFUSED_MS = 1000;
/** Probes that reach the upstream and fail back off from 1 s to 30 s. */
export const PROBE_FIRST_MS = 1000;
export const PROBE_MAX_MS = 30_000;
export const PROBE_TIMEOUT_MS = 5000;

interface UpstreamState {
  config: UpstreamConfig;
  /** When the current state began (ms). */
  since: number;
  lastError: string | null;
  probeTimer: ReturnType<typeof setTimeout> | null;
  probing: boolean;
  probeDelay: number;
  nextProbeAt: number;
}

export interface UpstreamReport {
  name: string;
  healthy: boolean;
  since: number;
  last_error: string | null;
}

export class UpstreamMonitor {
  readonly mem: HealthMemory = newHealthMemory();
  /**
   * Where an upstream is probed: each of its replicas in turn, the upstream
   * being up when any answers (docs/CONTRACT.md §21). The server sets it once
   * the replica sets exist (a replica's own breaker is closed by its own
   * probes, src/inference/replicas/set.ts).
   */
  urlsOf: (config: UpstreamConfig) => string[] = (config) => [config.base_url];
  private readonly ups: UpstreamState[];
  private stopped = false;

  constructor(
    upstreams: UpstreamConfig[],
    private readonly log: Logger,
  ) {
    const now = Date.now();
    this.ups = upstreams.map((config) => ({ config, since: now, lastError: null, probeTimer: null, probing: false, probeDelay: PROBE_FIRST_MS, nextProbeAt: 0 }));
    for (const u of this.ups) m.upstreamUp.set([u.config.name], 1);
  }

  /** The index of an upstream config (the key of its shared state). */
  indexOf(config: UpstreamConfig): number {
    return this.ups.findIndex((u) => u.config === config);
  }

  /** Confirmed down: interactive requests are refused at once. */
  isDown(u: number): boolean {
    return u >= 0 && isDown(this.mem, u);
  }

  /** Whole seconds until the next probe of a down upstream (at least 1): the retry-after of a fast 503. */
  retryAfterSeconds(u: number): number {
    const s = this.ups[u];
    return Math.max(1, Math.ceil(((s?.nextProbeAt ?? 0) - Date.now()) / 1000));
  }

  /** An interactive call's fate (./fate.ts): `POST path` with the model's timeout. */
  noteFate(u: number, fate: Fate, path: string, timeoutMs: number): void {
    const s = this.ups[u];
    if (!s) return;
    if (fate.kind === "engine_failure") s.lastError = describe(fate, path, timeoutMs);
    if (reportFate(this.mem, u, fate, false)) this.suspected(u, null);
  }

  /** Failures in a row made the upstream suspect (here or in a Worker): probe it now. */
  suspected(u: number, error: string | null): void {
    const s = this.ups[u];
    if (!s || this.stopped) return;
    if (error) s.lastError = error;
    if (!s.probing && !s.probeTimer && stateOf(this.mem, u) !== UP) this.scheduleProbe(u, 0);
  }

  /** A discovery (GET /models at start, every minute, for /status) answered or failed. */
  discovered(u: number, ok: boolean, error: string | null): void {
    const s = this.ups[u];
    if (!s) return;
    if (ok) return this.cameUp(u);
    s.lastError = error;
    this.wentDown(u);
  }

  /** Safety net, run on the batch runner's tick: a suspect or down upstream always has a probe coming. */
  sweep(): void {
    for (let u = 0; u < this.ups.length; u++) this.suspected(u, null);
  }

  private wentDown(u: number): void {
    const s = this.ups[u]!;
    if (!markDown(this.mem, u)) return;
    s.since = Date.now();
    s.probeDelay = PROBE_FIRST_MS;
    m.upstreamUp.set([s.config.name], 0);
    m.upstreamStateChanges.inc([s.config.name, "down"]);
    this.log.warn("upstream down", { upstream: s.config.name, error: s.lastError });
    if (!s.probing && !s.probeTimer && !this.stopped) this.scheduleProbe(u, PROBE_FIRST_MS);
  }

  private cameUp(u: number): void {
    const s = this.ups[u]!;
    const was = markUp(this.mem, u);
    if (s.probeTimer) clearTimeout(s.probeTimer);
    s.probeTimer = null;
    if (was !== DOWN) return;
    const downFor = Date.now() - s.since;
    s.since = Date.now();
    m.upstreamUp.set([s.config.name], 1);
    m.upstreamStateChanges.inc([s.config.name, "up"]);
    this.log.info("upstream up", { upstream: s.config.name, down_ms: downFor });
  }

  private scheduleProbe(u: number, delay: number): void {
    const s = this.ups[u]!;
    if (s.probeTimer) clearTimeout(s.probeTimer);
    s.nextProbeAt = Date.now() + delay;
    s.probeTimer = setTimeout(() => {
      s.probeTimer = null;
      void this.probe(u);
    }, delay);
    s.probeTimer.unref?.();
  }

  private async probe(u: number): Promise<void> {
    const s = this.ups[u]!;
    if (this.stopped || stateOf(this.mem, u) === UP) return;
    s.probing = true;
    const answer = await this.probeAny(s.config).finally(() => (s.probing = false));
    if (this.stopped) return;
    // Any 2xx brings the upstream up; any other answer (a 4xx too) fails the probe like no answer.
    if (answer.ok) return this.cameUp(u);
    s.lastError = `probe: ${answer.error}`;
    this.wentDown(u);
    const refused = answer.fate.kind === "engine_failure" && answer.fate.cause === "refused";
    const delay = refused ? PROBE_REFUSED_MS : s.probeDelay;
    if (!refused) s.probeDelay = Math.min(s.probeDelay * 2, PROBE_MAX_MS);
    this.scheduleProbe(u, delay);
  }

  /** `GET /models` of each replica in turn until one answers: its answer, or the last failure. */
  private async probeAny(config: UpstreamConfig) {
    const urls = this.urlsOf(config);
    let answer = await getModels(urls[0]!, config.api_key ?? null, PROBE_TIMEOUT_MS);
    for (let i = 1; !answer.ok && i < urls.length; i++) answer = await getModels(urls[i]!, config.api_key ?? null, PROBE_TIMEOUT_MS);
    return answer;
  }

  /** The upstream's name and, while it is down, since when (ms); null for an unknown index. */
  downInfo(u: number): { name: string; downSince: number | null } | null {
    const s = this.ups[u];
    if (!s) return null;
    return { name: s.config.name, downSince: isDown(this.mem, u) ? s.since : null };
  }

  /** GET /status: every upstream's state (a suspect one is still up: its probe decides). */
  report(): UpstreamReport[] {
    return this.ups.map((s, u) => ({ name: s.config.name, healthy: !isDown(this.mem, u), since: Math.floor(s.since / 1000), last_error: s.lastError }));
  }

  allUp(): boolean {
    return this.ups.every((_, u) => !isDown(this.mem, u));
  }

  stop(): void {
    this.stopped = true;
    for (const s of this.ups) if (s.probeTimer) clearTimeout(s.probeTimer);
  }
}

// The tests' upstream: the one fake engine (./engineReplicas.ts) as a single
// replica with a fixed latency (0 by default), serving "fake-chat" and
// "fake-embed", counting every request by its content and keeping arrival
// times, and giving every answer an x-request-id. This file only names its
// parts the way the tests of the pass-through and the batches read them;
// answers, streams, fault plans (./engineFaults.ts), hang and down/up are the
// engine's.

import { startEngineReplica } from "./engineReplicas";
import type { FailPlan } from "./engineFaults";

export { atRandom, hashOf, inShare, plans, type EngineFailure as FakeFailure, type FailPlan } from "./engineFaults";

export interface FakeUpstreamOptions {
  /** Model ids listed on GET /models (default fake-chat and fake-embed). */
  models?: string[];
  /** Delay before each answer (ms), fixed or per content. */
  latencyMs?: number | ((content: string) => number);
  plan?: FailPlan | null;
  /** A fixed port (default 0: any free one). */
  port?: number;
}

export interface FakeStats {
  /** POST requests received (any model). */
  requests: number;
  inFlight: number;
  maxInFlight: number;
  /** GET /models and GET /models/{id} requests received (health probes, discovery). */
  probes: number;
}

export interface FakeUpstream {
  /** http://127.0.0.1:PORT */
  url: string;
  /** url + "/v1": what OFFPEAK_UPSTREAM_URL / base_url should be. */
  baseUrl: string;
  port: number;
  /** Requests received, by content (the engine's contents()). */
  counts: Map<string, number>;
  /** Totals since start (or the last reset), read when asked. */
  readonly stats: FakeStats;
  /** The engine's knobs: change them between tests. */
  models: string[];
  latencyMs: number | ((content: string) => number);
  plan: FailPlan | null;
  /** While true, every request (probes too) is accepted, counted and never answered, until down() or stop(). */
  hang: boolean;
  /** Whether the listener is up (false between down() and up()). */
  readonly isUp: boolean;
  /** Clears counters (not the knobs). */
  reset(): void;
  /** The engine's kill(): connections dropped, then refused until up(). */
  down(): Promise<void>;
  /** The engine's restart(): on the same port, with the same knobs and counters. */
  up(): Promise<void>;
  /** POST requests that arrived in [from, to) (Date.now() times; `to` defaults to now). */
  requestsBetween(from: number, to?: number): number;
  stop(): Promise<void>;
}

/** How many of the sorted `times` fall in [from, to). */
const countIn = (times: number[], from: number, to: number) => times.filter((t) => t >= from && t < to).length;

export async function startFakeUpstream(opts: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const engine = await startEngineReplica(
    { decodeMs: 0, prefillMsPerKChar: 0, maxRunning: Infinity, cachePrefixes: 0 },
    { port: opts.port, models: opts.models ?? ["fake-chat", "fake-embed"], idleTimeout: 60, countContents: true, arrivals: true, requestIds: true },
  );
  engine.latencyMs = opts.latencyMs ?? 0;
  engine.plan = opts.plan ?? null;
  const url = `http://127.0.0.1:${engine.port}`;
  const knob = <K extends "models" | "latencyMs" | "plan" | "hang">(k: K) => ({ get: () => engine[k], set: (v: (typeof engine)[K]) => void (engine[k] = v), enumerable: true });
  const fake = {
    url,
    baseUrl: `${url}/v1`,
    port: engine.port,
    counts: engine.contents(),
    get stats(): FakeStats {
      const s = engine.stats();
      return { requests: s.received, inFlight: s.inFlight, maxInFlight: s.peakInFlight, probes: s.probes };
    },
    get isUp() {
      return engine.up;
    },
    reset: () => engine.reset(),
    down: async () => void (await engine.kill()),
    up: () => engine.restart(),
    requestsBetween: (from: number, to = Date.now() + 1) => countIn(engine.arrivals().posts, from, to),
    stop: () => engine.stop(),
  };
  return Object.defineProperties(fake, { models: knob("models"), latencyMs: knob("latencyMs"), plan: knob("plan"), hang: knob("hang") }) as FakeUpstream;
}

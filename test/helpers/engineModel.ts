// An engine model for tests and benchmarks (docs/CONTRACT.md §18, adaptive
// concurrency): a real OpenAI-compatible HTTP server on loopback (served by
// ./engineReplicas.ts) whose latency grows with the requests in flight the
// way a continuous-batching engine's does, deterministically.
//
// Every request needs the same work: `unloadedMs` of it when it runs alone.
// The requests in flight share the engine (processor sharing): with n of
// them, each progresses at speedAt(n), so a request that arrives slows the
// others down at once, as a bigger batch slows every decoding step.
//
//   n ≤ knee          speed falls gently (at the knee, latency is (1 + slope)
//                     × unloaded): throughput rises almost in proportion
//   knee < n ≤ cliff  the batch is full: latency grows in proportion to n,
//                     throughput stays at its peak
//   n > cliff         the "KV cache" overflows and requests are preempted and
//                     recomputed: throughput falls (÷ 1 + fall·(n − cliff)/cliff)
//   n ≥ failAt        a new request is answered 503 at once
//
// It counts what a benchmark needs to judge a limit: answers, 503s, the most
// in flight, and how long it spent with more than `cliff` in flight.

export interface EngineShape {
  /** Latency of a request alone, ms. */
  unloadedMs: number;
  /** Requests in flight where throughput stops rising. */
  knee: number;
  /** Requests in flight past which throughput falls. */
  cliff: number;
  /** From this many in flight, a new request gets 503 at once. */
  failAt: number;
  /** Latency at the knee is (1 + slope) × unloaded (default 0.1). */
  slope?: number;
  /** How fast throughput falls past the cliff (default 1: at 2 × cliff, half the peak). */
  fall?: number;
}

/** How fast each of n requests in flight progresses (1: as fast as alone). */
export function speedAt(e: EngineShape, n: number): number {
  const slope = e.slope ?? 0.1;
  const fall = e.fall ?? 1;
  if (n <= 1) return 1;
  const atKnee = 1 / (1 + slope);
  if (n <= e.knee) return 1 / (1 + (slope * (n - 1)) / Math.max(1, e.knee - 1));
  const full = (atKnee * e.knee) / n;
  if (n <= e.cliff) return full;
  return full / (1 + (fall * (n - e.cliff)) / e.cliff);
}

/** Latency with n in flight all along, ms. */
export const latencyAt = (e: EngineShape, n: number): number => e.unloadedMs / speedAt(e, n);

/** Answers per second with n in flight all along. */
export const throughputAt = (e: EngineShape, n: number): number => (n * 1000) / latencyAt(e, n);

export interface EngineStats {
  /** Requests answered 200. */
  answered: number;
  /** Requests answered 503 (too many in flight). */
  rejected: number;
  inFlight: number;
  maxInFlight: number;
  /** Time with more than `cliff` in flight, ms. */
  pastCliffMs: number;
  /** Time with anything in flight, ms. */
  busyMs: number;
  /** Time since the start or the last reset, ms. */
  elapsedMs: number;
}

export interface EngineModel {
  /** http://127.0.0.1:PORT/v1: an upstream's base_url. */
  baseUrl: string;
  port: number;
  shape: EngineShape;
  stats(): EngineStats;
  reset(): void;
  stop(): Promise<void>;
}

/**
 * The engine served: one replica of ./engineReplicas.ts (the one engine of
 * the tests and benchmarks) with no batch limit and no prefill, so that every
 * request in flight shares the engine by speedAt() as above, and `failAt`
 * requests held answer 503.
 */
export async function startEngineModel(shape: EngineShape, opts: { port?: number; models?: string[] } = {}): Promise<EngineModel> {
  const { startEngineReplica } = await import("./engineReplicas");
  const replica = await startEngineReplica(
    { decodeMs: shape.unloadedMs, prefillMsPerKChar: 0, maxRunning: Infinity, cachePrefixes: 0, maxQueued: shape.failAt, knee: shape.knee, cliff: shape.cliff, slope: shape.slope, fall: shape.fall },
    { port: opts.port, models: opts.models ?? ["engine-chat"] },
  );
  return {
    baseUrl: replica.baseUrl,
    port: replica.port,
    shape,
    stats() {
      const s = replica.stats();
      return { answered: s.answered, rejected: s.rejected, inFlight: s.inFlight, maxInFlight: s.peakInFlight, pastCliffMs: s.pastCliffMs, busyMs: s.busyMs, elapsedMs: s.elapsedMs };
    },
    reset: () => replica.reset(),
    stop: () => replica.stop(),
  };
}

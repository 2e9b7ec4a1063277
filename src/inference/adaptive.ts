// Adaptive concurrency (SPEC §18): how many requests an upstream engine
// should have in flight, found while it runs, for `max_concurrency: "auto"`.
//
// An inference engine that batches requests (vLLM, TGI, llama.cpp's server)
// answers more requests per second as more run at once, at first almost
// without slowing each one down; past a point (its batch is full, its KV
// cache overflows and it preempts) more requests only wait longer, and far
// past it throughput falls or it answers 503. Interactive requests share the
// same slots, and each waits as long as the engine takes: the best limit is
// the smallest one that keeps the engine's throughput at its peak.
//
// This is TCP Vegas as Netflix's concurrency-limits applies it to requests
// (VegasLimit), measured per window rather than per request: with the limit
// binding, Little's law gives throughput = in flight / latency, so the
// latency ratio r = latency / floor (the floor: the least latency seen
// lately) says how much of the concurrency added since the floor turned into
// throughput (1/r of it) and how much only waits inside the engine
// (Vegas's "queue", L·(1 − 1/r)). So:
//
//   r < 1.15 and the limit binding: grow (×1.5 at the start, "slow start";
//            then ×1.2 while r < 1.05, else ×1.08; at least +1)
//   1.15 … 1.3: hold (Vegas's alpha…beta band)
//   r > 1.3: latency grew without throughput: shrink toward r = 1.2
//            (L × 1.2 / r, at most halving), on the second such window
//            in a row
//   429/503 in the window: cut to 0.7× at once (and grow only by +1 near
//            where it happened, for a while)
//
// The floor is the minimum of the window means over a horizon, not for
// ever: requests of another batch may take longer, and a floor from shorter
// ones would keep the limit low. A controller that runs at its limit never
// sees its floor again, though, and a floor that only aged out would creep
// up with the load (Vegas's known drift). So, as BBR's ProbeRTT does, it
// probes: every probe interval (10 s, or 50 floors if longer) it halves the
// limit for one window, which measures the latency below the knee again. A
// probe that finds the latency well above the floor (the engine got slower,
// or the requests longer) replaces the floor; one that finds a lower floor
// probes again soon.
//
// Pure: it sees windows (src/inference/scheduler.ts measures them from the
// slots' shared cells) and returns limits; the unit tests feed it a
// simulated engine.

export interface AdaptiveOptions {
  /** The limit to start from (default 8, at most `max`). */
  initial?: number;
  /** Never above this (max_concurrency_limit, or a cluster node's share of it). */
  max: number;
  /** Never below this (default 1). */
  min?: number;
  /** Probe interval floor, ms (default 10 s; at least 50 floors). */
  probeEveryMs?: number;
}

export interface LimitWindow {
  /** When the window closed: ms on any monotonic clock. */
  at: number;
  /** Requests answered (2xx) in the window. */
  completions: number;
  /** Their mean slot held time, ms. */
  latencyMs: number;
  /** 429/503 answers in the window. */
  overloads: number;
  /** Whether requests had to wait for a slot (or filled the limit) during the window: only then is a higher limit worth trying. */
  binding: boolean;
}

export type Decision = "start" | "grow" | "hold" | "shrink" | "overload" | "probe" | "probed" | "idle";

export interface TracePoint {
  at: number;
  limit: number;
  latencyMs: number | null;
  floorMs: number | null;
  decision: Decision;
}

/** Latency ratios (window mean / floor) that bound the hold band, and what a shrink aims at. */
export const GROW_BELOW = 1.15;
export const SHRINK_ABOVE = 1.3;
export const SHRINK_TO = 1.2;
const NEAR_FLOOR = 1.05;
const OVERLOAD_CUT = 0.7;
/** Trace points kept (for /metrics readers and the benchmark: a few minutes of windows). */
const TRACE = 512;

export class AdaptiveLimit {
  /** The limit to apply now (an integer within [min, max]). */
  limit: number;
  /** The least window mean latency within the horizon, ms (null before the first window). */
  floorMs: number | null = null;
  /** The last window's mean latency, ms. */
  latencyMs: number | null = null;
  last: Decision = "start";
  readonly trace: TracePoint[] = [];
  private max: number;
  private readonly min: number;
  private readonly probeEveryMs: number;
  /** The limit outside probes, unrounded. */
  private estimate: number;
  private floors: { at: number; ms: number }[] = [];
  private slowStart = true;
  private probing = false;
  /** When the next probe is due (null: not before slow start ends). */
  private nextProbeAt: number | null = null;
  /** The limit at which the engine last answered 429/503, and when. */
  private overloadAt: { limit: number; at: number } | null = null;
  private lastActive: number | null = null;
  /** Windows in a row with the latency above the band. */
  private high = 0;

  constructor(opts: AdaptiveOptions) {
    this.max = Math.max(1, Math.floor(opts.max));
    this.min = Math.max(1, Math.min(this.max, Math.floor(opts.min ?? 1)));
    this.probeEveryMs = opts.probeEveryMs ?? 10_000;
    this.estimate = Math.max(this.min, Math.min(this.max, opts.initial ?? 8));
    this.limit = Math.round(this.estimate);
    this.note(0);
  }

  /** A new ceiling (a cluster's share changed): the limit follows it down at once. */
  setMax(max: number): void {
    this.max = Math.max(this.min, Math.floor(max));
    this.estimate = Math.min(this.estimate, this.max);
    this.limit = Math.min(this.limit, this.max);
  }

  get ceiling(): number {
    return this.max;
  }

  /** How long a probe interval is now: 10 s, or 50 floors for slow engines. */
  private probeInterval(): number {
    return Math.max(this.probeEveryMs, 50 * (this.floorMs ?? 0));
  }

  /** Takes one window's measurements; returns the limit to apply from now on. */
  update(w: LimitWindow): number {
    if (w.completions === 0 && w.overloads === 0) {
      this.last = "idle";
      return this.limit;
    }
    const horizon = 3 * this.probeInterval();
    // Back after a long pause: what was learnt may be about other requests.
    if (this.lastActive !== null && w.at - this.lastActive > horizon) this.floors = [];
    this.lastActive = w.at;
    if (w.overloads > 0) {
      // The engine says it is past its capacity: believe it at once.
      const from = this.probing ? this.estimate : Math.min(this.estimate, this.limit);
      this.probing = false;
      this.slowStart = false;
      this.overloadAt = { limit: from, at: w.at };
      this.estimate = Math.max(this.min, from * OVERLOAD_CUT);
      // A floor measured this far up is suspect: check it at the next chance.
      this.nextProbeAt = w.at;
      return this.apply(w.at, "overload", Math.round(this.estimate));
    }
    this.latencyMs = w.latencyMs;
    this.floors = this.floors.filter((f) => w.at - f.at <= horizon);
    const before = this.floorMs;
    this.floors.push({ at: w.at, ms: w.latencyMs });
    let floor = Infinity;
    for (const f of this.floors) floor = Math.min(floor, f.ms);
    if (this.probing) {
      this.probing = false;
      let lower = before !== null && floor < before * 0.95;
      // At half the limit the latency is still well above the floor: the
      // floor is from lighter requests or a faster engine. Start from this.
      if (before !== null && w.latencyMs > before * SHRINK_ABOVE) {
        this.floors = [{ at: w.at, ms: w.latencyMs }];
        floor = w.latencyMs;
        lower = false;
      }
      this.floorMs = floor;
      // Lower than before: the limit was past the knee, and may still be: look again soon.
      this.nextProbeAt = w.at + (lower ? this.probeInterval() / 10 : this.probeInterval());
      return this.apply(w.at, "probed", Math.round(this.estimate));
    }
    this.floorMs = floor;
    const r = w.latencyMs / floor;
    let decision: Decision = "hold";
    this.high = r > SHRINK_ABOVE ? this.high + 1 : 0;
    if (r > SHRINK_ABOVE) {
      // Two windows in a row: one slow window is as often a pause on this
      // side (a Worker busy writing its part, a GC) as the engine's doing.
      if (this.high >= 2) {
        this.estimate = Math.max(this.min, this.estimate * Math.max(0.5, SHRINK_TO / r));
        this.high = 0;
        decision = "shrink";
      }
      this.slowStart = false;
    } else if (r < GROW_BELOW && w.binding && this.estimate < this.max) {
      const factor = r < NEAR_FLOOR ? (this.slowStart ? 1.5 : 1.2) : 1.08;
      let next = Math.max(this.estimate + 1, this.estimate * factor);
      // Near where the engine last said 429/503: one at a time (for a few probe intervals).
      const o = this.overloadAt;
      if (o && w.at - o.at > horizon) this.overloadAt = null;
      else if (o && next > 0.9 * o.limit) next = this.estimate + 1;
      this.estimate = Math.min(this.max, next);
      decision = "grow";
    } else if (r >= GROW_BELOW) this.slowStart = false;
    // Slow start over: the limit is near the knee. Check the floor at once
    // (it was measured at the initial limit, perhaps already past the knee),
    // then every probe interval, while there is load to probe with.
    if (!this.slowStart && this.nextProbeAt === null) this.nextProbeAt = w.at;
    if (w.binding && this.nextProbeAt !== null && w.at >= this.nextProbeAt && this.estimate >= 2 * this.min) {
      this.probing = true;
      return this.apply(w.at, "probe", Math.max(this.min, Math.round(this.estimate / 2)));
    }
    return this.apply(w.at, decision, Math.round(this.estimate));
  }

  private apply(at: number, decision: Decision, limit: number): number {
    this.limit = Math.max(this.min, Math.min(this.max, limit));
    this.last = decision;
    this.note(at);
    return this.limit;
  }

  private note(at: number): void {
    if (this.trace.length >= TRACE) this.trace.shift();
    this.trace.push({ at, limit: this.limit, latencyMs: this.latencyMs, floorMs: this.floorMs, decision: this.last });
  }
}

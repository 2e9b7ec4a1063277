// Adaptive concurrency (docs/CONTRACT.md §18): how many requests an upstream engine
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
// latency ratio r = latency / floor (the floor: the latency below the
// knee, measured lately) says how much of the concurrency added since the
// floor turned into throughput (1/r of it) and how much only waits inside
// the engine (Vegas's "queue", L·(1 − 1/r)). So:
//
//   r < 1.1 and the limit binding: grow (×1.5 at the start, "slow start";
//            then ×1.2 while r < 1.05, else ×1.08; at least +1)
//   1.1 … 1.25: hold (Vegas's alpha…beta band)
//   r > 1.25: latency grew without throughput: shrink toward r = 1.15
//            (L × 1.15 / r, by a fifth at most unless r > 2.5), on the
//            second such window in a row or right after a step up
//   429/503 in the window: cut to 0.7× at once (and grow only by +1 near
//            where it happened, for a while)
//
// The floor is the latency below the knee measured lately, not for
// ever: requests of another batch may take longer, and a floor from shorter
// ones would keep the limit low. A controller that runs at its limit never
// sees its floor again, though, and a floor that only aged out would creep
// up with the load (Vegas's known drift). So, as BBR's ProbeRTT does, it
// probes: every probe interval (10 s, or 50 floors up to 5 min) it halves the
// limit for one window, which measures the latency below the knee again.
// The floor is the median of those probes, the slow-start windows, and any
// window far below it, over three intervals. Two probes in a row that find
// the latency well above the floor (the engine got slower, or the requests
// longer) replace it; one that finds it well below judges the window
// before the probe again against the new floor (the limit was past the
// knee) and probes again soon, at once if far below. Each decision reads
// the window together with the one before it at the same limit, a shrink
// needs two high windows in a row (or follows a step up), and the limit
// holds for three windows after a shrink: window means are noisy when
// requests differ in size, and a pause on offpeak's side looks like a slow
// engine.
//
// Pure: it sees windows (src/inference/admission/scheduler.ts measures them from the
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
export const GROW_BELOW = 1.1;
export const SHRINK_ABOVE = 1.25;
export const SHRINK_TO = 1.15;
const NEAR_FLOOR = 1.05;
const OVERLOAD_CUT = 0.7;
/** However slow the engine, a probe at least this often (a floor measured past the knee would otherwise stretch the interval). */
const MAX_PROBE_EVERY_MS = 300_000;
/** Trace points kept (for /metrics readers and the benchmark: a few minutes of windows). */
const TRACE = 512;

export class AdaptiveLimit {
  /** The limit to apply now (an integer within [min, max]; 0 only while max is 0). */
  limit: number;
  /** The latency below the knee: the median of recent probes and slow-start windows, ms (null before the first window). */
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
  /** The last probe found the latency well above the floor. */
  private staleProbe = false;
  /** Windows left before the limit may grow again after a shrink. */
  private cool = 0;
  /** The estimate before the last step up. */
  private grewFrom = 0;
  /** The latency that the probe now running was decided on. */
  private beforeProbeMs = 0;
  /** The window before, at the limit it ran with. */
  private prev: { limit: number; n: number; ms: number } | null = null;

  constructor(opts: AdaptiveOptions) {
    this.max = Math.max(1, Math.floor(opts.max));
    this.min = Math.max(1, Math.min(this.max, Math.floor(opts.min ?? 1)));
    this.probeEveryMs = opts.probeEveryMs ?? 10_000;
    this.estimate = Math.max(this.min, Math.min(this.max, opts.initial ?? 8));
    this.limit = Math.round(this.estimate);
    this.note(0);
  }

  /** A new ceiling (a cluster's share changed): the limit follows it down at once. 0: no slots here (more nodes than max_concurrency_limit). */
  setMax(max: number): void {
    this.max = Math.max(0, Math.floor(max));
    const least = Math.min(this.min, this.max);
    this.estimate = Math.max(least, Math.min(this.estimate, this.max));
    this.limit = Math.max(least, Math.min(this.limit, this.max));
  }

  get ceiling(): number {
    return this.max;
  }

  /** How long a probe interval is now: 10 s, or 50 floors for slow engines. */
  private probeInterval(): number {
    return Math.max(this.probeEveryMs, Math.min(50 * (this.floorMs ?? 0), MAX_PROBE_EVERY_MS));
  }

  /** Takes one window's measurements; returns the limit to apply from now on. */
  update(w: LimitWindow): number {
    if (w.completions === 0 && w.overloads === 0) {
      this.last = "idle";
      return this.limit;
    }
    const horizon = 3 * this.probeInterval();
    // Back after a long pause: what was learnt may be about other requests.
    if (this.lastActive !== null && w.at - this.lastActive > horizon) {
      this.floors = [];
      this.prev = null;
    }
    this.lastActive = w.at;
    if (w.overloads > 0) {
      // The engine says it is past its capacity: believe it at once.
      const from = this.probing ? this.estimate : Math.min(this.estimate, this.limit);
      this.probing = false;
      this.slowStart = false;
      this.overloadAt = { limit: from, at: w.at };
      this.prev = null;
      this.estimate = Math.max(this.min, from * OVERLOAD_CUT);
      // A floor measured this far up is suspect: check it at the next chance.
      this.nextProbeAt = w.at;
      return this.apply(w.at, "overload", Math.round(this.estimate));
    }
    this.latencyMs = w.latencyMs;
    this.floors = this.floors.filter((f) => w.at - f.at <= horizon);
    const before = this.floorMs;
    if (this.probing) {
      this.probing = false;
      this.prev = null;
      this.floors.push({ at: w.at, ms: w.latencyMs });
      const lower = before !== null && w.latencyMs < before * 0.9;
      // Well below the floor at half the limit: what is far above this was measured past the knee.
      if (lower) this.floors = this.floors.filter((f) => f.ms <= w.latencyMs * SHRINK_ABOVE);
      // At half the limit the latency is still well above the floor: the
      // floor is from lighter requests or a faster engine, or this window
      // was slow for reasons of its own. Two such probes in a row: start
      // from this one.
      const above = before !== null && w.latencyMs > before * SHRINK_ABOVE;
      if (above && this.staleProbe) {
        this.floors = [{ at: w.at, ms: w.latencyMs }];
        this.staleProbe = false;
      } else this.staleProbe = above;
      this.floorMs = middle(this.floors);
      // The floor was too high: so was the limit before the probe. Judge
      // that window again against the new floor rather than wait for more.
      const rBefore = this.beforeProbeMs / this.floorMs;
      if (lower && rBefore > SHRINK_ABOVE) this.estimate = Math.max(this.min, this.estimate * Math.max(0.5, SHRINK_TO / rBefore));
      // Lower than before: the limit was past the knee, and may still be
      // (far lower: halve again at once); above: the next probe confirms it or not.
      const farLower = before !== null && w.latencyMs < before * 0.8;
      this.nextProbeAt = farLower ? w.at : w.at + (lower || this.staleProbe ? this.probeInterval() / 10 : this.probeInterval());
      return this.apply(w.at, "probed", Math.round(this.estimate));
    }
    // This window together with the one before it at the same limit: half the noise.
    const p = this.prev && this.prev.limit === this.limit ? this.prev : null;
    const ms = p ? (p.ms * p.n + w.latencyMs * w.completions) / (p.n + w.completions) : w.latencyMs;
    this.prev = { limit: this.limit, n: w.completions, ms: w.latencyMs };
    // What the floor is made of: probes, the windows of slow start that
    // were near it, and a window far below it (the requests got lighter).
    // Not every window, and a median, not a minimum: the least of many
    // noisy windows is the luckiest one, and a floor that low keeps the
    // limit low (Netflix's Gradient2 notes the same about minimums).
    const first = this.floors.length === 0;
    if (first || (before !== null && (ms < before * 0.8 || (this.slowStart && ms < before * SHRINK_ABOVE)))) this.floors.push({ at: w.at, ms });
    const floor = middle(this.floors);
    this.floorMs = floor;
    const r = ms / floor;
    let decision: Decision = "hold";
    this.high = r > SHRINK_ABOVE ? this.high + 1 : 0;
    if (this.cool > 0) this.cool--;
    if (r > SHRINK_ABOVE) {
      // Two windows in a row, unless the last step up did it: one slow
      // window is as often a pause on this side (a Worker busy writing its
      // part, a GC) as the engine's doing.
      const grew = this.last === "grow" ? this.grewFrom : null;
      if (this.high >= 2 || grew !== null) {
        // A fifth at most, unless far above: a pause on this side (the
        // machine busy) looks the same from here, and costs less this way.
        let next = this.estimate * Math.max(r > 2 * SHRINK_ABOVE ? 0.5 : 0.8, SHRINK_TO / r);
        if (grew !== null) next = Math.min(next, grew);
        // At least one fewer: at small limits a rounded step is no step.
        this.estimate = Math.max(this.min, Math.min(next, this.limit - 1));
        this.high = 0;
        // Hold a while before trying higher again.
        this.cool = 3;
        decision = "shrink";
      }
      this.slowStart = false;
    } else if (r < GROW_BELOW && w.binding && this.estimate < this.max && this.cool === 0) {
      const factor = this.slowStart ? 1.5 : r < NEAR_FLOOR ? 1.2 : 1.08;
      let next = Math.max(this.estimate + 1, this.estimate * factor);
      // Near where the engine last said 429/503: one at a time (for a few probe intervals).
      const o = this.overloadAt;
      if (o && w.at - o.at > horizon) this.overloadAt = null;
      else if (o && next > 0.9 * o.limit) next = this.estimate + 1;
      this.grewFrom = this.estimate;
      this.estimate = Math.min(this.max, next);
      decision = "grow";
    } else if (r >= GROW_BELOW) this.slowStart = false;
    // Slow start over: the limit is near the knee. Check the floor at once
    // (it was measured at the initial limit, perhaps already past the knee),
    // then every probe interval, while there is load to probe with.
    if (!this.slowStart && this.nextProbeAt === null) this.nextProbeAt = w.at;
    if (decision === "hold" && w.binding && this.nextProbeAt !== null && w.at >= this.nextProbeAt && this.estimate >= 2 * this.min) {
      this.probing = true;
      this.beforeProbeMs = ms;
      return this.apply(w.at, "probe", Math.max(this.min, Math.round(this.estimate / 2)));
    }
    return this.apply(w.at, decision, Math.round(this.estimate));
  }

  private apply(at: number, decision: Decision, limit: number): number {
    this.limit = Math.max(Math.min(this.min, this.max), Math.min(this.max, limit));
    this.last = decision;
    this.note(at);
    return this.limit;
  }

  private note(at: number): void {
    if (this.trace.length >= TRACE) this.trace.shift();
    this.trace.push({ at, limit: this.limit, latencyMs: this.latencyMs, floorMs: this.floorMs, decision: this.last });
  }
}

/** The median of the floor's measurements: robust to one lucky (or slow) window, as a minimum is not. */
function middle(floors: { ms: number }[]): number {
  const xs = floors.map((f) => f.ms).sort((a, b) => a - b);
  const mid = xs.length >> 1;
  return xs.length % 2 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
}

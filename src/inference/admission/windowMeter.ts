// The adaptive controller's eyes (./adaptive.ts): every tick it reads a
// limited model's slot cells (./slotCells.ts), sums what changed into a
// window, and when the window is long enough and holds enough answers hands
// it to the controller, whose limit then goes into the model's lane.
import type { AdaptiveLimit } from "./adaptive";
import { ANSWERS, HELD, OVERLOADS } from "./slotCells";

/** Where the meter finds, from its lane's base, the answers, their summed time (`heldPerMs` units a ms) and the overloads. */
export interface MeterLayout {
  readonly answers: number;
  readonly held: number;
  readonly overloads: number;
  readonly heldPerMs: number;
}

/** A model's slot cells (./slotCells.ts): held time in tenths of a ms. */
export const SLOT_METER: MeterLayout = { answers: ANSWERS, held: HELD, overloads: OVERLOADS, heldPerMs: 10 };

/** What the meter reads and sets of a model's lane in the scheduler (./scheduler.ts ModelLane). */
export interface MeteredLane {
  /** Where releases count what they saw. */
  readonly meter: { cells: Int32Array; base: number } | null;
  /** Requests that had to wait for want of a slot since the meter last looked (the meter resets it). */
  pressure: number;
  readonly limit: number | null;
  readonly inFlight: number;
  setLimit(limit: number): void;
}

/** A window lasts at least this, and at least one mean latency… */
const MIN_WINDOW_MS = 200;
/** …and holds this many answers, unless it has waited MAX_WINDOW_MS (or 2 latencies) for them. */
const MIN_SAMPLES = 32;
const MAX_WINDOW_MS = 2000;
/** After a change, what was measured for one mean latency (at most this) is not counted: those requests began under the old limit. */
const MAX_SETTLE_MS = 30_000;
/** A tick this much late (or a tenth of the latency, if more) means this process was held: the window is not counted (WindowMeter). */
const STALL_MS = 10;

/**
 * Turns an adaptive lane's cells into the controller's windows: differences
 * of the counts since the last tick, summed until the window is long enough
 * and holds enough answers; then the controller's limit goes into the lane.
 */
export class WindowMeter {
  private answers: number;
  private held: number;
  private overloads: number;
  private sum = { answers: 0, held: 0, overloads: 0 };
  private binding = false;
  /** The latest a tick of this window came (ms): this thread, and so the process, was held that long. */
  private maxLateMs = 0;
  private start: number;
  private settleUntil = 0;

  constructor(
    private readonly lane: MeteredLane,
    private readonly ctl: AdaptiveLimit,
    now: number,
    private readonly at: MeterLayout = SLOT_METER,
  ) {
    const { cells, base } = lane.meter!;
    this.answers = Atomics.load(cells, base + at.answers);
    this.held = Atomics.load(cells, base + at.held);
    this.overloads = Atomics.load(cells, base + at.overloads);
    this.start = now;
  }

  /** `lateMs`: how late this tick came (the timer's; 0 when a test ticks). */
  tick(now: number, lateMs = 0): void {
    const lane = this.lane;
    const { cells, base } = lane.meter!;
    const at = this.at;
    const answers = Atomics.load(cells, base + at.answers);
    const held = Atomics.load(cells, base + at.held);
    const overloads = Atomics.load(cells, base + at.overloads);
    // Int32 counts wrap: a difference taken as Int32 is right across the wrap.
    const dA = (answers - this.answers) | 0;
    const dH = (held - this.held) | 0;
    const dO = (overloads - this.overloads) | 0;
    this.answers = answers;
    this.held = held;
    this.overloads = overloads;
    const binding = lane.pressure > 0 || (lane.limit !== null && lane.inFlight >= lane.limit);
    lane.pressure = 0;
    if (now < this.settleUntil) return;
    this.sum.answers += dA;
    this.sum.held += dH;
    this.sum.overloads += dO;
    this.binding ||= binding;
    const latency = this.ctl.latencyMs ?? 0;
    this.maxLateMs = Math.max(this.maxLateMs, lateMs);
    const elapsed = now - this.start;
    const long = elapsed >= Math.max(MIN_WINDOW_MS, latency);
    // A 429/503 is acted on at once; otherwise a window needs its length and its answers.
    if (this.sum.overloads === 0 && !(long && (this.sum.answers >= MIN_SAMPLES || elapsed >= Math.max(MAX_WINDOW_MS, 2 * latency)))) return;
    const { answers: n, held: h, overloads: o } = this.sum;
    const wasBinding = this.binding;
    const meanMs = n > 0 ? h / this.at.heldPerMs / n : 0;
    // Held here, this process was held everywhere (a busy machine, a GC, a
    // container's CPU quota): the answers that came meanwhile were seen
    // late, and their slots look held longer than the engine took. A hold of
    // more than a tenth of the latency (the controller's, or before it knows
    // one, this window's own) makes the window not the engine's. Judged
    // against the latency, not a fixed time: under a CPU quota every window
    // has holds of tens of ms, which a 1 s latency hardly notices, and a
    // fixed bound would leave the controller at its start for good.
    const stalled = this.maxLateMs > Math.max(STALL_MS, (this.ctl.latencyMs ?? meanMs) / 10);
    this.sum = { answers: 0, held: 0, overloads: 0 };
    this.binding = false;
    this.maxLateMs = 0;
    this.start = now;
    if ((n === 0 && o === 0) || (stalled && o === 0)) return;
    const limit = this.ctl.update({ at: now, completions: n, latencyMs: meanMs, overloads: o, binding: wasBinding });
    if (limit !== lane.limit) {
      lane.setLimit(limit);
      this.settleUntil = now + Math.min(this.ctl.latencyMs ?? 0, MAX_SETTLE_MS);
      this.start = this.settleUntil;
    }
  }
}

// The order batches are served in (SPEC §18), and the off-peak calendar.
//
// One order, used in both places where batches compete: where shards are
// claimed for Workers (db/claims.ts, from the database, so every node of a
// cluster follows it) and where batch lines wait for a model's slots
// (inference/admission/scheduler.ts, the BatchQueue below). It is:
//
//   1. the deadline's hour (expires_at / hour, floored): earlier first;
//      deadlines in the same hour count as equal;
//   2. then projects in turn: the one served least recently (in the
//      scheduler) / holding fewest running shards (in claims) goes next;
//   3. then that project's batches in turn, the same way; then the lines of
//      one batch in arrival order.
//
// Starvation-free by construction: a waiting batch B with deadline hour H
// can only be passed by batches of an hour ≤ H. New batches have deadlines
// of at least now + 1h, so once the clock is within an hour of H no new
// batch can come before B: those ahead of it are a finite set. Within its
// hour, each grant goes to the project at the head of a rotation and moves
// it to the back (likewise batches within a project), so with P projects and
// K batches in B's project, B is served within P × K grants of its hour
// being first — every waiting batch is served within a bounded number of
// grants, however many lines the others have.

/** What places a batch in the order; one object per batch, shared by its waiters (`capped` changes in place). */
export interface BatchKey {
  /** floor(expires_at / hour): earlier first. */
  bucket: number;
  project: string;
  batch: string;
  /** Held to the model's peak share now (window ≥ 24h during peak hours, not overridden). */
  capped: boolean;
}

export const NO_KEY: BatchKey = { bucket: Number.MAX_SAFE_INTEGER, project: "", batch: "", capped: false };

export function bucketOf(expiresAtS: number, hourSeconds: number): number {
  return Math.floor(expiresAtS / hourSeconds);
}

interface Keyed {
  cancelled: boolean;
  key?: BatchKey;
}

/** Round-robin list: served entries go to the back. */
class Ring<K, V> {
  readonly m = new Map<K, V>();
  /** Moves `k` behind the others (a Map iterates in insertion order). */
  rotate(k: K): void {
    const v = this.m.get(k);
    if (v === undefined) return;
    this.m.delete(k);
    this.m.set(k, v);
  }
}

/**
 * Batch lines waiting for one model's slots, in the order above. `take`
 * hands out the first waiter that `allow` accepts (a capped batch at its
 * cap is skipped, not a wall for the uncapped behind it).
 */
export class BatchQueue<W extends Keyed> {
  private readonly buckets = new Map<number, Ring<string, Ring<string, W[]>>>();
  private sorted: number[] = [];
  private n = 0;

  get length(): number {
    return this.n;
  }

  push(w: W): void {
    const k = w.key ?? NO_KEY;
    let b = this.buckets.get(k.bucket);
    if (!b) {
      this.buckets.set(k.bucket, (b = new Ring()));
      this.sorted = [...this.buckets.keys()].sort((x, y) => x - y);
    }
    let p = b.m.get(k.project);
    if (!p) b.m.set(k.project, (p = new Ring()));
    let q = p.m.get(k.batch);
    if (!q) p.m.set(k.batch, (q = []));
    q.push(w);
    this.n++;
  }

  remove(w: W): boolean {
    const k = w.key ?? NO_KEY;
    const q = this.buckets.get(k.bucket)?.m.get(k.project)?.m.get(k.batch);
    const i = q ? q.indexOf(w) : -1;
    if (i === -1) return false;
    q!.splice(i, 1);
    this.n--;
    this.prune(k);
    return true;
  }

  /** Waiters of capped batches (whether or not they could be granted now). */
  cappedWaiting(): number {
    let c = 0;
    for (const b of this.buckets.values()) for (const p of b.m.values()) for (const q of p.m.values()) if (q[0]?.key?.capped) c += q.length;
    return c;
  }

  take(allow: (w: W) => boolean = () => true): W | undefined {
    for (const bucket of this.sorted) {
      const b = this.buckets.get(bucket)!;
      for (const [project, p] of b.m) {
        for (const [batch, q] of p.m) {
          while (q.length && q[0]!.cancelled) {
            q.shift();
            this.n--;
          }
          const w = q[0];
          if (!w || !allow(w)) continue;
          q.shift();
          this.n--;
          // This batch, and its project, go to the back of their turns.
          p.rotate(batch);
          b.rotate(project);
          this.prune(w.key ?? NO_KEY);
          return w;
        }
      }
    }
    // Only cancelled or held-back waiters: drop what is empty.
    for (const b of [...this.buckets.values()]) for (const p of [...b.m.values()]) for (const [batch, q] of [...p.m]) if (q.length === 0) p.m.delete(batch);
    this.pruneAll();
    return undefined;
  }

  private prune(k: BatchKey): void {
    const b = this.buckets.get(k.bucket);
    const p = b?.m.get(k.project);
    if (!b || !p) return;
    if (p.m.get(k.batch)?.length === 0) p.m.delete(k.batch);
    if (p.m.size === 0) b.m.delete(k.project);
    if (b.m.size === 0) {
      this.buckets.delete(k.bucket);
      this.sorted = this.sorted.filter((x) => x !== k.bucket);
    }
  }

  private pruneAll(): void {
    for (const [bucket, b] of [...this.buckets]) {
      for (const [project, p] of [...b.m]) if (p.m.size === 0) b.m.delete(project);
      if (b.m.size === 0) this.buckets.delete(bucket);
    }
    this.sorted = [...this.buckets.keys()].sort((x, y) => x - y);
  }
}

/**
 * Shard claims in the same order (db/claims.ts): among candidate batches,
 * the earliest deadline hour, then the project with fewest shards running
 * (cluster-wide, from the rows: its turn), then the batch with fewest
 * running, then the oldest. Returns the index of the next one to serve.
 */
export function nextCandidate(c: readonly { bucket: number; project: string; running: number; seq: number }[], runningByProject: Map<string, number>): number {
  let best = -1;
  for (let i = 0; i < c.length; i++) {
    if (best === -1) {
      best = i;
      continue;
    }
    const x = c[i]!;
    const y = c[best]!;
    const d = x.bucket - y.bucket || (runningByProject.get(x.project) ?? 0) - (runningByProject.get(y.project) ?? 0) || x.running - y.running || x.seq - y.seq;
    if (d < 0) best = i;
  }
  return best;
}

// ── off-peak hours ────────────────────────────────────────────────────────

export interface PeakWindow {
  days: string;
  from: string;
  to: string;
  tz: string;
}

interface ParsedWindow {
  days: Set<number>;
  from: number;
  to: number;
  tz: string;
  fmt: Intl.DateTimeFormat;
}

const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

function dayList(s: string): Set<number> {
  const out = new Set<number>();
  for (const part of s.toLowerCase().split(",").map((x) => x.trim())) {
    const m = /^([a-z]{3})(?:-([a-z]{3}))?$/.exec(part);
    const a = m ? DAYS.indexOf(m[1]!) : -1;
    const b = m?.[2] ? DAYS.indexOf(m[2]) : a;
    if (a < 0 || b < 0) throw new Error(`days "${s}": expected days like "mon-fri" or "sat,sun"`);
    for (let d = a; ; d = (d + 1) % 7) {
      out.add(d);
      if (d === b) break;
    }
  }
  return out;
}

function minutes(s: string, what: string): number {
  const m = /^(\d{2}):(\d{2})$/.exec(s);
  if (!m || +m[1]! > 24 || +m[2]! > 59 || (+m[1]! === 24 && +m[2]! !== 0)) throw new Error(`${what} "${s}": expected HH:MM`);
  return +m[1]! * 60 + +m[2]!;
}

/** The peak-hours calendar: throws (with a message naming the bad field) on a bad entry. */
export class PeakCalendar {
  private readonly windows: ParsedWindow[];
  constructor(windows: readonly PeakWindow[]) {
    this.windows = windows.map((w, i) => {
      let fmt: Intl.DateTimeFormat;
      try {
        fmt = new Intl.DateTimeFormat("en-US", { timeZone: w.tz, weekday: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
      } catch {
        throw new Error(`batches.peak_hours[${i}].tz "${w.tz}": not an IANA time zone`);
      }
      try {
        const from = minutes(w.from, "from");
        const to = minutes(w.to, "to");
        if (from === to) throw new Error(`from and to are both ${w.from}`);
        return { days: dayList(w.days), from, to, tz: w.tz, fmt };
      } catch (e) {
        throw new Error(`batches.peak_hours[${i}]: ${(e as Error).message}`);
      }
    });
  }

  get empty(): boolean {
    return this.windows.length === 0;
  }

  /**
   * Whether `atMs` is in peak hours. A window whose `to` is not after its
   * `from` runs across midnight: it belongs to the day it starts on (fri
   * 22:00–06:00 covers Saturday 03:00).
   */
  inPeak(atMs: number): boolean {
    for (const w of this.windows) {
      const parts = w.fmt.formatToParts(atMs);
      const day = DAYS.indexOf(parts.find((p) => p.type === "weekday")!.value.toLowerCase().slice(0, 3));
      const t = +parts.find((p) => p.type === "hour")!.value * 60 + +parts.find((p) => p.type === "minute")!.value;
      if (w.from < w.to) {
        if (w.days.has(day) && t >= w.from && t < w.to) return true;
      } else {
        if (w.days.has(day) && t >= w.from) return true;
        if (w.days.has((day + 6) % 7) && t < w.to) return true;
      }
    }
    return false;
  }
}

const calendars = new WeakMap<readonly PeakWindow[], PeakCalendar>();

/** Peak hours now, and the share of a model's concurrency capped batches get now (1: no cap). */
export function peakNow(cfg: { peakHours: readonly PeakWindow[]; peakShare: number }, atMs = Date.now()): { peak: boolean; share: number } {
  if (!cfg.peakHours?.length) return { peak: false, share: 1 };
  let cal = calendars.get(cfg.peakHours);
  if (!cal) calendars.set(cfg.peakHours, (cal = new PeakCalendar(cfg.peakHours)));
  const peak = !cal.empty && cal.inPeak(atMs);
  return { peak, share: peak ? (cfg.peakShare ?? 1) : 1 };
}

// Off-peak hours (docs/CONTRACT.md §18, batches.peak_hours and batches.peak_share): the
// calendar of peak windows, and the share of a model's concurrency that
// batches with a window of 24h or more get now. Which batches are capped,
// and the deadline override, are the runner's (runner/peakCap.ts); the cap
// itself is the scheduler's (inference/admission/scheduler.ts).

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

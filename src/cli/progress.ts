// Progress on stderr. On a terminal: one line redrawn in place (bar,
// done/total, rate, ETA, and why a batch waits when the server says so).
// Otherwise (a pipe, a CI log): one plain line every
// few seconds and at every status change, never carriage returns or colours.

export interface ProgressSink {
  write(s: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** Lines per second over a sliding window of samples (a fresh rate, not the average since start). */
export class RateMeter {
  private readonly samples: [number, number][] = [];
  constructor(private readonly windowMs = 20_000) {}

  add(t: number, done: number): void {
    const last = this.samples[this.samples.length - 1];
    if (last && done < last[1]) this.samples.length = 0; // a count that went back: start over
    this.samples.push([t, done]);
    while (this.samples.length > 2 && t - this.samples[0]![0] > this.windowMs) this.samples.shift();
  }

  reset(): void {
    this.samples.length = 0;
  }

  /** Per second, or null until there are two samples at least 0.5 s apart. */
  rate(): number | null {
    if (this.samples.length < 2) return null;
    const [t0, d0] = this.samples[0]!;
    const [t1, d1] = this.samples[this.samples.length - 1]!;
    if (t1 - t0 < 500) return null;
    return ((d1 - d0) * 1000) / (t1 - t0);
  }
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, "0")}h`;
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

const int = (n: number) => n.toLocaleString("en-US");

function rateText(rate: number | null, unit: string): string {
  if (rate === null) return "";
  if (unit === "B") return `${formatBytes(rate)}/s`;
  return `${rate >= 100 ? int(Math.round(rate)) : rate.toFixed(1)} ${unit}/s`;
}

export interface ProgressState {
  /** What is happening: a batch status, "uploading", "downloading". */
  label: string;
  done: number;
  /** null when unknown (e.g. a batch still validating). */
  total: number | null;
  /** Failed lines so far (shown when > 0). */
  failed?: number;
  /** "lines" or "B" (bytes). */
  unit: "lines" | "B";
  /** The server's estimate of the end (Unix s, a batch's estimated_completion_at): the ETA shown, rather than one from the rate measured here. */
  eta?: number | null;
  /** Why it is not moving (a batch's status_details), shown after the counts: "waiting: upstream vllm is down (since 12:03)". */
  note?: string | null;
}

/** "12:03" (local time) for a time today, else "2025-03-04 12:03". */
export function clockTime(unixSeconds: number, now = Date.now()): string {
  const d = new Date(unixSeconds * 1000);
  const two = (n: number) => String(n).padStart(2, "0");
  const hm = `${two(d.getHours())}:${two(d.getMinutes())}`;
  return d.toDateString() === new Date(now).toDateString() ? hm : `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${hm}`;
}

/** The progress note for a batch's status_details: "waiting: upstream vllm is down (since 12:03)". */
export function waitingNote(details: { message: string; since: number | null } | null | undefined, now = Date.now()): string | null {
  if (!details) return null;
  return `waiting: ${details.message}${details.since ? ` (since ${clockTime(details.since, now)})` : ""}`;
}

/** Seconds left: the server's estimate when it has one, else from the rate measured here (none while the server says it is not moving). */
function secondsLeft(s: ProgressState, rate: number | null, now: number): number | null {
  if (s.total === null || s.done >= s.total) return null;
  if (s.eta) return Math.max(0, s.eta - now / 1000);
  if (s.note) return null;
  return rate ? (s.total - s.done) / rate : null;
}

/** One line for a terminal: `label [█████░░░░░]  52%  5,200/10,000  1,234 lines/s  ETA 4s  3 failed`. */
export function renderBar(s: ProgressState, rate: number | null, columns: number, now = Date.now()): string {
  const amount = (n: number) => (s.unit === "B" ? formatBytes(n) : int(n));
  const pct = s.total ? Math.min(100, (s.done / s.total) * 100) : null;
  const parts = [pct === null ? "" : `${pct.toFixed(0).padStart(3)}%`, s.total !== null ? `${amount(s.done)}/${amount(s.total)}` : amount(s.done), rateText(rate, s.unit)];
  const left = secondsLeft(s, rate, now);
  if (left !== null) parts.push(`ETA ${formatDuration(left)}`);
  if (s.failed) parts.push(`${int(s.failed)} failed`);
  if (s.note) parts.push(s.note);
  const tail = parts.filter(Boolean).join("  ");
  const label = s.label.padEnd(11);
  // A fixed width (not what the text leaves), so the bar does not jump as the numbers grow.
  const width = Math.min(30, columns - 60);
  let bar = "";
  if (width >= 10) {
    const filled = pct === null ? 0 : Math.round((pct / 100) * width);
    bar = `[${"█".repeat(filled)}${"░".repeat(width - filled)}] `;
  }
  const line = `${label} ${bar}${tail}`;
  return line.length >= columns ? line.slice(0, Math.max(0, columns - 1)) : line;
}

/** One plain line for logs: `batch_… in_progress 5200/10000 (52.0%) 1234 lines/s ETA 4s, 3 failed`. */
export function renderPlain(prefix: string, s: ProgressState, rate: number | null, now = Date.now()): string {
  const amount = (n: number) => (s.unit === "B" ? formatBytes(n) : String(n));
  let line = `${prefix}${s.label} ${s.total !== null ? `${amount(s.done)}/${amount(s.total)}` : amount(s.done)}`;
  if (s.total) line += ` (${Math.min(100, (s.done / s.total) * 100).toFixed(1)}%)`;
  const r = rateText(rate, s.unit);
  if (r) line += ` ${r}`;
  const left = secondsLeft(s, rate, now);
  if (left !== null) line += ` ETA ${formatDuration(left)}`;
  if (s.failed) line += `, ${s.failed} failed`;
  if (s.note) line += `; ${s.note}`;
  return line;
}

export interface ProgressOptions {
  sink?: ProgressSink;
  /** Force terminal or plain mode (default: the sink's isTTY). */
  tty?: boolean;
  /** Plain mode: ms between lines while nothing changes (default 5000). */
  plainEveryMs?: number;
  /** Plain mode: put before each line (e.g. the batch id). */
  prefix?: string;
  quiet?: boolean;
}

export class Progress {
  private readonly sink: ProgressSink;
  readonly tty: boolean;
  private readonly every: number;
  private readonly meter = new RateMeter();
  private lastPlainAt = 0;
  private lastLabel: string | null = null;
  private lastNote: string | null = null;
  private lastUnit: string | null = null;
  private drawn = false;
  private lastDraw = 0;

  constructor(private readonly opts: ProgressOptions = {}) {
    this.sink = opts.sink ?? process.stderr;
    this.tty = opts.tty ?? !!this.sink.isTTY;
    this.every = opts.plainEveryMs ?? 5000;
  }

  update(s: ProgressState, now = Date.now()): void {
    if (this.opts.quiet) return;
    if (s.label !== this.lastLabel) {
      // A new phase measures its own rate; a new kind of count (bytes → lines) gets its own line.
      if (this.tty && this.drawn && s.unit !== this.lastUnit) this.finishLine();
      this.meter.reset();
    }
    this.lastUnit = s.unit;
    this.meter.add(now, s.done);
    const rate = this.meter.rate();
    // A new reason for waiting (or its end) is news too: a plain line at once.
    const changed = s.label !== this.lastLabel || (s.note ?? null) !== this.lastNote;
    this.lastLabel = s.label;
    this.lastNote = s.note ?? null;
    if (this.tty) {
      // Redraw at most 10 times a second.
      if (!changed && now - this.lastDraw < 100 && s.done !== s.total) return;
      this.lastDraw = now;
      this.sink.write(`\r${renderBar(s, rate, this.sink.columns || 80, now)}\x1b[K`);
      this.drawn = true;
      return;
    }
    if (changed || now - this.lastPlainAt >= this.every) {
      this.lastPlainAt = now;
      this.sink.write(renderPlain(this.opts.prefix ?? "", s, rate, now) + "\n");
    }
  }

  /** Ends the line in progress (terminal) so that what follows starts clean. */
  finishLine(): void {
    if (this.tty && this.drawn) this.sink.write("\n");
    this.drawn = false;
  }

  /** A message between progress lines. */
  note(text: string): void {
    if (this.opts.quiet) return;
    this.finishLine();
    this.sink.write(text + "\n");
  }
}

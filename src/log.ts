// Structured logs: one JSON object per line on stderr. Never log secrets:
// callers pass ids (key_id, request_id), never keys or headers, and as a
// safety net any field named like a secret, and anything that looks like an
// offpeak key or a bearer credential inside a string field, is redacted.
//
// Lines are buffered and written to fd 2 together, every FLUSH_MS or
// FLUSH_BYTES, whichever comes first: a write(2) per request costs the chat
// pass-through 15–25% of its throughput (measured: 0.52–0.60× a naive proxy
// with the request log on, 0.70× with it off; see docs/benchmarks/history.md,
// "Chat completions through a proxy"). An error line, and everything
// buffered before it, is written at once and
// synchronously (the process may die right after it); so is the buffer at
// process exit (SIGTERM and SIGINT end in process.exit through main.ts; an
// uncaught exception is written as an error line before the runtime's own
// report; an unhandled rejection ends in 'exit'). Only a SIGKILL or an OOM
// kill can lose lines: at most the last FLUSH_MS of them.
//
// Why not Bun's FileSink (`Bun.stderr.writer()`): it writes every ≈4 KB
// whatever its highWaterMark (4140-byte pwritev2 calls under strace, Bun
// 1.4.5), costs ≈1 µs more per line than pushing a string into an array,
// and what it holds cannot be written out synchronously at exit. Why not
// pino: its destination (sonic-boom) is this same buffer-and-writeSync loop,
// and our lines are already one JSON.stringify each.
import { writeSync } from "node:fs";
import type { LogLevel } from "./config";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  /** Written at once, synchronously, with every line buffered before it. */
  error(msg: string, fields?: Record<string, unknown>): void;
  /**
   * A line whose fields the caller already wrote as JSON members
   * (`"a":1,"b":"x"`, no braces) and redacted: for the one line per HTTP
   * request, where building a fields object, stringifying and scanning it
   * for secrets cost more than everything else the line does.
   */
  members(level: LogLevel, msg: string, members: string): void;
  /** Whether a line at `level` would be written (to skip building fields that would be dropped). */
  enabled(level: LogLevel): boolean;
  /** Writes every buffered line now (synchronously). */
  flush(): void;
}

const SECRET_FIELDS = new Set(["authorization", "x-api-key", "api_key", "apikey", "key", "secret", "password", "token", "cookie"]);
const SECRET_TEXT = /sk-[A-Za-z0-9_-]{6,}|Bearer\s+[^\s"',]+/gi;

export function redact(fields: Record<string, unknown>): Record<string, unknown> {
  let out: Record<string, unknown> | null = null;
  for (const k in fields) {
    const v = fields[k];
    let clean = v;
    if (SECRET_FIELDS.has(k.toLowerCase())) clean = "[redacted]";
    else if (typeof v === "string" && (v.includes("sk-") || /bearer/i.test(v))) clean = v.replace(SECRET_TEXT, "[redacted]");
    if (clean !== v) (out ??= { ...fields })[k] = clean;
  }
  return out ?? fields;
}

/** Where finished lines go: `write` may buffer; `flush` writes everything now. */
export interface LineSink {
  write(line: string): void;
  flush(): void;
}

/** Flush after this long at most (the delay a line may wait in the buffer). */
export const FLUSH_MS = 10;
/** …or once this much is buffered (≈100 request lines). */
export const FLUSH_BYTES = 32 * 1024;
/** Past this much waiting for a reader that does not read (a full pipe), new lines are dropped and counted. */
const MAX_PENDING = 8 << 20;
/** How long a synchronous flush waits for a full pipe to take the bytes. */
const SYNC_FLUSH_MS = 2000;

type WriteFn = (fd: number, buf: Uint8Array, offset: number, length: number) => number;

/**
 * Buffers lines for a file descriptor and writes them in one write(2) per
 * flush. Ordered: bytes the descriptor refused (EAGAIN: Bun puts stderr
 * pipes in non-blocking mode) are written before anything newer.
 */
export class BufferedFdSink implements LineSink {
  private lines: string[] = [];
  /** UTF-16 length of `lines` (close enough to bytes for the thresholds). */
  private pending = 0;
  /** Encoded bytes a write left over (EAGAIN or a short write), written first. */
  private rest: Uint8Array | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private broken = false;
  /** Lines dropped because the descriptor did not take bytes for too long (reported in a line once it does). */
  dropped = 0;
  /** Index in `lines` where that report goes (-1: none pending). */
  private dropMark = -1;
  private readonly encoder = new TextEncoder();

  constructor(
    private readonly fd: number,
    private readonly writeFn: WriteFn = writeSync,
  ) {}

  write(line: string): void {
    if (this.broken) return;
    if (this.pending + (this.rest?.length ?? 0) > MAX_PENDING) {
      // A place for the line that will say how many were dropped here.
      if (this.dropMark < 0) {
        this.dropMark = this.lines.length;
        this.lines.push("");
      }
      this.dropped++;
      return;
    }
    this.lines.push(line);
    this.pending += line.length;
    // While the descriptor refuses bytes, the timer retries (not every line).
    if (this.pending >= FLUSH_BYTES && this.rest === null) this.tryFlush();
    else this.arm(FLUSH_MS);
  }

  /** Writes everything now, waiting (up to SYNC_FLUSH_MS) for a full pipe. */
  flush(): void {
    const deadline = performance.now() + SYNC_FLUSH_MS;
    while (!this.tryFlush() && !this.broken && performance.now() < deadline) Bun.sleepSync(1);
  }

  private arm(ms: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.tryFlush();
    }, ms);
    // A buffered line must never keep the process alive; exit flushes it.
    this.timer.unref?.();
  }

  /** One non-blocking attempt; true if nothing is left. */
  private tryFlush(): boolean {
    if (this.broken) return true;
    for (;;) {
      if (this.rest === null) {
        if (this.dropMark >= 0) {
          // Where the lines went missing, what the reader missed.
          this.lines[this.dropMark] = JSON.stringify({ time: isoNow(), level: "warn", msg: "log lines dropped: stderr did not take them", count: this.dropped }) + "\n";
          this.dropped = 0;
          this.dropMark = -1;
        }
        if (this.lines.length === 0) return true;
        this.rest = this.encoder.encode(this.lines.length === 1 ? this.lines[0]! : this.lines.join(""));
        this.lines = [];
        this.pending = 0;
      }
      const buf = this.rest;
      let off = 0;
      try {
        while (off < buf.length) off += this.writeFn(this.fd, buf, off, buf.length - off);
      } catch (e) {
        const code = (e as { code?: string }).code;
        if (code !== "EAGAIN" && code !== "EWOULDBLOCK" && code !== "EINTR") {
          // Closed or unusable (EPIPE, EBADF): nowhere left to write.
          this.broken = true;
          this.rest = null;
          this.lines = [];
          this.dropMark = -1;
          return true;
        }
      }
      if (off < buf.length) {
        // Written first next time, before anything newer.
        this.rest = buf.subarray(off);
        this.arm(FLUSH_MS);
        return false;
      }
      this.rest = null;
    }
  }
}

let stderrSink: BufferedFdSink | null = null;

/** The process's one buffered stderr sink, flushed at exit. */
export function stderrLines(): BufferedFdSink {
  if (!stderrSink) {
    // A flush must never wait for the reader: a blocking write(2) to a full
    // pipe holds the event loop until the reader drains it (measured at 32
    // connections: 0.63× a naive proxy with the request log against 0.97×
    // without, at the same CPU per request). Bun makes fd 2 non-blocking
    // (O_NONBLOCK) when process.stderr is first touched; a refused write
    // (EAGAIN) is then retried by the timer.
    void process.stderr;
    const sink = (stderrSink = new BufferedFdSink(2));
    process.on("exit", () => sink.flush());
    // Runs before the runtime prints the exception and exits (it does not
    // catch it): what was logged before the crash comes out first, then the
    // crash itself as a JSON line.
    process.on("uncaughtExceptionMonitor", (err) => {
      const text = String((err as Error)?.stack ?? err).replace(SECRET_TEXT, "[redacted]");
      sink.write(JSON.stringify({ time: new Date().toISOString(), level: "error", msg: "uncaught exception", error: text }) + "\n");
      sink.flush();
    });
  }
  return stderrSink;
}

let lastMs = 0;
let lastIso = "";
/** The time as ISO 8601, formatted once per millisecond (many request lines share one). */
function isoNow(): string {
  const now = Date.now();
  if (now !== lastMs) {
    lastMs = now;
    lastIso = new Date(now).toISOString();
  }
  return lastIso;
}

/** Logs to `sink` (by default the process's buffered stderr); a function sink gets each line as it is made. */
export function createLogger(level: LogLevel, sink: LineSink | ((line: string) => void) = stderrLines()): Logger {
  const out: LineSink = typeof sink === "function" ? { write: sink, flush() {} } : sink;
  const min = ORDER[level];
  // A line's start (time, level, message) is the same for every line of one
  // millisecond with the same level and message (the request lines of a busy
  // server): made once for them. ≈0.3 µs a request line less than joining
  // its five parts each time (bench/request-log.ts).
  let headMs = -1;
  let headLevel = "";
  let headMsg = "";
  let head = "";
  const put = (lvl: LogLevel, msg: string, members: string) => {
    const time = isoNow();
    if (lastMs !== headMs || lvl !== headLevel || msg !== headMsg) {
      headMs = lastMs;
      headLevel = lvl;
      headMsg = msg;
      head = `{"time":"${time}","level":"${lvl}","msg":${JSON.stringify(msg)}`;
    }
    // Joined as text rather than stringified from a spread object (fields
    // named time, level or msg would repeat those keys; none does).
    out.write(members.length > 0 ? head + "," + members + "}\n" : head + "}\n");
    // The process may be about to die (that is often why there is an error).
    if (lvl === "error") out.flush();
  };
  const emit = (lvl: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    const rest = fields ? JSON.stringify(redact(fields)) : "{}";
    put(lvl, msg, rest.slice(1, -1));
  };
  return {
    debug: emit("debug"),
    info: emit("info"),
    warn: emit("warn"),
    error: emit("error"),
    members: (lvl, msg, members) => {
      if (ORDER[lvl] >= min) put(lvl, msg, members);
    },
    enabled: (lvl) => ORDER[lvl] >= min,
    flush: () => out.flush(),
  };
}

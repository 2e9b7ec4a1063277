// Structured logs: one JSON object per line on stderr. Never log secrets:
// callers pass ids (key_id, request_id), never keys or headers, and as a
// safety net any field named like a secret, and anything that looks like an
// offpeak key or a bearer credential inside a string field, is redacted.
import type { LogLevel } from "./config";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** Whether a line at `level` would be written (to skip building fields that would be dropped). */
  enabled(level: LogLevel): boolean;
}

const SECRET_FIELDS = new Set(["authorization", "api_key", "apikey", "key", "secret", "password", "token", "cookie"]);
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

export function createLogger(level: LogLevel, sink: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const min = ORDER[level];
  const emit = (lvl: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    sink(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...(fields ? redact(fields) : undefined) }) + "\n");
  };
  return { debug: emit("debug"), info: emit("info"), warn: emit("warn"), error: emit("error"), enabled: (lvl) => ORDER[lvl] >= min };
}

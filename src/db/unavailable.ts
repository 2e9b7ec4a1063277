// The one place that tells "the database is not there" (a restart, a
// failover, a network cut: docs/CONTRACT.md §17) from every other database error. Such
// an error says nothing about the query: the same query is right again once
// the database answers. So a request that needed it is answered 503
// database_unavailable with retry-after (src/app.ts), and work that records
// progress keeps what it has and writes it again later (src/batches/runner.ts),
// where any other error is a bug (500, logged with its stack).
//
// What counts, as Bun's SQL client reports it (its `code`), under Drizzle's
// DrizzleQueryError (its `cause`):
// - the client could not connect, or lost its connection: the
//   ERR_POSTGRES_CONNECTION_* codes, the idle/lifetime timeouts, and the
//   socket errors (ECONNREFUSED, ECONNRESET …) where one shows through;
// - the server said so (ERR_POSTGRES_SERVER_ERROR with its SQLSTATE in
//   `errno`): 57P01 admin_shutdown (a fast shutdown ends every session),
//   57P02 crash_shutdown, 57P03 cannot_connect_now (starting up or
//   recovering), 53300 too_many_connections, and class 08, connection
//   exceptions.

/** A database error that says the database is unreachable now, not that the query is wrong. */
export class DatabaseUnavailable extends Error {
  override readonly name = "DatabaseUnavailable";
  constructor(message = "The database is unavailable", options?: { cause?: unknown }) {
    super(message, options);
  }
}

const CLIENT_CODES = new Set([
  "ERR_POSTGRES_CONNECTION_CLOSED",
  "ERR_POSTGRES_CONNECTION_FAILED",
  "ERR_POSTGRES_CONNECTION_REFUSED",
  "ERR_POSTGRES_CONNECTION_TIMEOUT",
  "ERR_POSTGRES_IDLE_TIMEOUT",
  "ERR_POSTGRES_LIFETIME_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "EAI_AGAIN",
]);

const SERVER_STATES = new Set(["57P01", "57P02", "57P03", "53300"]);

function saysUnavailable(e: unknown): boolean {
  if (!e || typeof e !== "object") return false;
  const { code, errno } = e as { code?: unknown; errno?: unknown };
  if (typeof code === "string" && CLIENT_CODES.has(code)) return true;
  // A server error's SQLSTATE (Bun: `errno`; other clients: `code`).
  for (const state of [errno, code]) if (typeof state === "string" && state.length === 5 && (SERVER_STATES.has(state) || state.startsWith("08"))) return true;
  return false;
}

/**
 * `e` as a DatabaseUnavailable if it (or an error that caused it, a few
 * levels down) says the database is unreachable; else null.
 */
export function databaseUnavailable(e: unknown): DatabaseUnavailable | null {
  let at: unknown = e;
  for (let depth = 0; depth < 5 && at && typeof at === "object"; depth++) {
    if (at instanceof DatabaseUnavailable) return at;
    if (saysUnavailable(at)) {
      const { code, errno, message } = at as { code?: string; errno?: string; message?: string };
      return new DatabaseUnavailable(`The database is unavailable (${[code, errno].filter(Boolean).join(" ")}: ${message ?? ""})`, { cause: e });
    }
    at = (at as { cause?: unknown }).cause;
  }
  return null;
}

export const isDatabaseUnavailable = (e: unknown): boolean => databaseUnavailable(e) !== null;

/**
 * Logs that the database is unavailable at most once per `everyMs` for each
 * `what` (one line per failed request or tick would flood the log during a
 * restart), with the count of failures left unlogged meanwhile.
 */
export function unavailableLogger(log: (msg: string, fields: Record<string, unknown>) => void, everyMs = 5000) {
  const last = new Map<string, { at: number; quiet: number }>();
  return (what: string, e: DatabaseUnavailable, fields: Record<string, unknown> = {}): void => {
    const now = Date.now();
    const seen = last.get(what);
    if (seen && now - seen.at < everyMs) {
      seen.quiet++;
      return;
    }
    last.set(what, { at: now, quiet: 0 });
    log("database unavailable", { what, error: e.message, ...(seen?.quiet ? { since_last_logged: seen.quiet } : {}), ...fields });
  };
}

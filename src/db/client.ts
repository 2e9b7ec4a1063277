// The database: SQLite in the data dir (the default) or Postgres (clusters,
// docs/CONTRACT.md §14). This folder is the only place that knows which: the rest of the
// code gets a `Db` — a Drizzle database typed as Postgres's async query
// builder, with the tables of its dialect in `db.t` — and awaits its
// queries. Dialect-specific SQL lives in `db.sql` (dialect.ts).
import type { BunSQLDatabase } from "drizzle-orm/bun-sql";
import type * as pgSchema from "./schema/pg";
import type { Tables } from "./schema";
import type { DialectSql } from "./dialect";

export type Dialect = "sqlite" | "postgres";

/**
 * Where the records live: resolved once from database.url (config.ts). On
 * Postgres, `pool` is the most connections this node opens (OFFPEAK_PG_POOL;
 * default POSTGRES_POOL in ./postgres.ts).
 */
export type DatabaseConfig = { kind: "sqlite"; path: string } | { kind: "postgres"; url: string; pool?: number };


type Drizzle = BunSQLDatabase<typeof pgSchema>;

export type Db = Omit<Drizzle, "$client"> & {
  /** Which database this is ("dialect" is taken: Drizzle keeps its SQL builder there). */
  readonly engine: Dialect;
  /** The tables of this database's dialect. */
  readonly t: Tables;
  /** SQL whose text differs between the dialects. */
  readonly sql: DialectSql;
  /**
   * Makes every transaction committed so far durable (survives an OS crash
   * or power loss). Await it after the commit and before the answer that
   * reports the record (a file, a batch, a key, a revocation, a deletion).
   */
  syncCommits(): Promise<void>;
  /**
   * A number that changes when another process may have revoked an API key
   * (SQLite: PRAGMA data_version, exact; Postgres: bumped by every
   * revocation notice and by a count polled every 250 ms by each node).
   * In-process changes are signalled by keysChanged().
   */
  keysVersion(): number;
  /**
   * Calls `listener` when another process (a node, the keys CLI) may have
   * revoked API keys: with the key's id when the revoker said which
   * (Postgres NOTIFY, within milliseconds), or null when only "something
   * changed" is known, checked every 250 ms (SQLite: PRAGMA data_version
   * moved; Postgres: the count of revoked keys moved, or the listening
   * connection came back, having missed what was sent meanwhile). Never a
   * query per request. Returns the unsubscribe.
   */
  watchRevocations(listener: (keyId: string | null) => void): () => void;
  /** Tells the other processes on this database that `keyId` was just revoked (Postgres: NOTIFY; SQLite: nothing, its watchers see the file change). */
  announceRevocation(keyId: string): Promise<void>;
  /**
   * Runs statements that may share one commit, each atomic on its own (the
   * body uses `db`, not a transaction handle): on SQLite one transaction,
   * because a commit each costs several times more; on Postgres each
   * statement commits by itself, and no connection is held for the group.
   * The body follows the transaction rule (it awaits only its queries).
   */
  grouped<T>(body: () => Promise<T>): Promise<T>;
  /** A cheap round trip (GET /status). */
  ping(): Promise<void>;
  close(): Promise<void>;
};

/** A transaction's handle: the same query builder, bound to the transaction. */
export type Tx = Parameters<Parameters<Drizzle["transaction"]>[0]>[0];
/** Either: code that runs inside or outside a transaction takes this. */
export type Queryable = Tx | Db;

/**
 * How long a server waits for a Postgres that does not answer at start (it
 * starts later, or restarts): `ms` in all, telling `log` at each try
 * ("waiting for the database"). Without it, opening fails at once.
 */
export interface StartWait {
  ms: number;
  log(msg: string, fields: Record<string, unknown>): void;
}

export async function openDb(cfg: DatabaseConfig, opts: { synchronous?: "NORMAL" | "FULL"; wait?: StartWait } = {}): Promise<Db> {
  if (cfg.kind === "postgres") return (await import("./postgres")).openPostgres(cfg.url, opts.wait, cfg.pool);
  return (await import("./sqlite")).openSqlite(cfg.path, opts);
}


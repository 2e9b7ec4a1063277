// The few SQL fragments whose text differs between SQLite and Postgres.
import { sql, type SQL, type SQLWrapper } from "drizzle-orm";
import type { Logger } from "drizzle-orm";
import type { Dialect } from "./client";
import { m } from "../metrics";

/** Drizzle's logger, used to count statements (offpeak_db_queries_total), never to print them. */
export function countQueries(engine: Dialect): Logger {
  const label = [engine];
  return { logQuery: () => m.dbQueries.inc(label) };
}

export interface DialectSql {
  /** The larger of two values (SQLite's two-argument max(), Postgres's greatest()). */
  greatest(a: SQLWrapper | unknown, b: SQLWrapper | unknown): SQL;
  /** `coalesce(sum(x), 0)` as a JS number (Postgres sums bigints as numeric, which arrives as a string). */
  sumNumber(x: SQLWrapper): SQL<number>;
  /** count(*) as a JS number. */
  count(): SQL<number>;
}

export function dialectSql(dialect: Dialect): DialectSql {
  const pg = dialect === "postgres";
  return {
    greatest: (a, b) => (pg ? sql`greatest(${a}, ${b})` : sql`max(${a}, ${b})`),
    sumNumber: (x) => (pg ? sql`coalesce(sum(${x}), 0)::float8` : sql`coalesce(sum(${x}), 0)`).mapWith(Number) as SQL<number>,
    count: () => (pg ? sql`count(*)::int` : sql`count(*)`).mapWith(Number) as SQL<number>,
  };
}

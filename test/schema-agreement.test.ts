// The SQLite schema (src/db/schema/sqlite/) and the Postgres one
// (src/db/schema/pg/) describe the same tables: code outside src/db is typed
// against the Postgres set and runs on either (src/db/schema/index.ts casts
// the SQLite set to it), so nothing but this test notices when one side
// changes alone. It also checks that each dialect's migrations (drizzle/,
// drizzle-pg/, and their embedded copy src/db/migrations.gen.ts) are in step
// with its schema. No database needed.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Column, getTableColumns, is } from "drizzle-orm";
import { getTableConfig as pgTableConfig, IndexedColumn, PgTable } from "drizzle-orm/pg-core";
import { getTableConfig as sqliteTableConfig, SQLiteTable } from "drizzle-orm/sqlite-core";
import { generateDrizzleJson, generateMigration, generateSQLiteDrizzleJson, generateSQLiteMigration } from "drizzle-kit/api";
import * as pg from "../src/db/schema/pg";
import * as sqlite from "../src/db/schema/sqlite";
import { pgMigrations, sqliteMigrations } from "../src/db/migrations.gen";
import { readMigrations } from "../scripts/embed-migrations";

const ROOT = join(import.meta.dir, "..");

/**
 * The column types offpeak uses, in one vocabulary: each drizzle column
 * class of a dialect maps to one word, and only these pairs agree. A column
 * of any other class fails the test until it is added here on purpose (with
 * its twin on the other side).
 */
const SQLITE_TYPES: Record<string, string> = {
  SQLiteText: "text",
  SQLiteTextJson: "json", // text("…", { mode: "json" })
  SQLiteInteger: "int64", // integer("…"): SQLite integers are 64-bit
  SQLiteReal: "float64",
};
const PG_TYPES: Record<string, string> = {
  PgText: "text",
  PgJsonb: "json",
  PgBigInt53: "int64", // bigint("…", { mode: "number" })
  PgDoublePrecision: "float64",
  PgBigSerial53: "serial", // bigserial("…", { mode: "number" })
};
/** SQLite's `integer().primaryKey({ autoIncrement: true })` is Postgres's bigserial. */
const SQLITE_SERIAL = "serial";

function typeOf(c: Column, map: Record<string, string>): string {
  if ((c as Column & { autoIncrement?: boolean }).autoIncrement) return SQLITE_SERIAL;
  const t = map[c.columnType];
  if (!t) throw new Error(`${c.name}: column type ${c.columnType} is in no pair of test/schema-agreement.test.ts`);
  return t;
}

/** A default both dialects can write the same way: a number, string, boolean or null. */
function defaultOf(c: Column): unknown {
  if (c.defaultFn || c.onUpdateFn) throw new Error(`${c.name}: a JS default function; compare it by hand here`);
  const d = c.default;
  if (d === undefined || d === null || ["number", "string", "boolean"].includes(typeof d)) return d ?? null;
  throw new Error(`${c.name}: an SQL default; compare it by hand here`);
}

const names = (cols: readonly { name: string }[]) => cols.map((c) => c.name);

/**
 * An index's column as its name: a SQLite column, or a Postgres one in the
 * default order (ascending, nulls last, no operator class: what SQLite's
 * b-tree does); any other order is spelled out, so it has no SQLite twin.
 */
const indexedColumn = (index: string | undefined) => (c: unknown): string => {
  if (is(c, Column)) return c.name;
  if (is(c, IndexedColumn)) {
    const { order, nulls, opClass } = c.indexConfig;
    return order === "asc" && nulls === "last" && !opClass ? c.name! : `${c.name} ${order} nulls ${nulls} ${opClass ?? ""}`.trim();
  }
  throw new Error(`${index}: an index on an expression; compare it by hand here`);
};

interface TableShape {
  name: string;
  columns: Record<string, { name: string; type: string; dataType: string; notNull: boolean; primary: boolean; default: unknown; hasDefault: boolean; unique: string | null }>;
  primaryKeys: { name: string; columns: string[] }[];
  indexes: { name: string | undefined; columns: string[]; unique: boolean; where: boolean; method: string | undefined }[];
  uniques: { name: string | undefined; columns: string[] }[];
  foreignKeys: { name: string; columns: string[]; table: string; foreignColumns: string[]; onDelete: string; onUpdate: string }[];
  checks: string[];
}

/** What both databases do on a referenced row's delete or update when nothing is said (Postgres's drizzle writes it, SQLite's leaves it unset). */
const NO_ACTION = "no action";

type Config = ReturnType<typeof sqliteTableConfig> | ReturnType<typeof pgTableConfig>;

function shapeOf(config: Config, types: Record<string, string>, tableName: (t: unknown) => string): TableShape {
  const byName = <T extends { name: string | undefined }>(list: T[]) => list.sort((a, b) => String(a.name).localeCompare(String(b.name)));
  return {
    name: config.name,
    columns: Object.fromEntries(
      (config.columns as Column[]).map((c) => [
        c.name,
        {
          name: c.name,
          type: typeOf(c, types),
          dataType: c.dataType,
          notNull: c.notNull,
          primary: c.primary,
          default: defaultOf(c),
          hasDefault: c.hasDefault,
          unique: c.isUnique ? (c.uniqueName ?? "") : null,
        },
      ]),
    ),
    primaryKeys: byName(config.primaryKeys.map((k) => ({ name: k.getName(), columns: names(k.columns) }))),
    indexes: byName(
      config.indexes.map((i) => ({
        name: i.config.name,
        columns: (i.config.columns as unknown[]).map(indexedColumn(i.config.name)),
        unique: i.config.unique ?? false,
        where: i.config.where !== undefined,
        // SQLite's indexes are b-trees; a Postgres index of another kind has no twin.
        method: "method" in i.config ? i.config.method : "btree",
      })),
    ),
    uniques: byName(config.uniqueConstraints.map((u) => ({ name: u.name, columns: names(u.columns) }))),
    foreignKeys: byName(
      config.foreignKeys.map((fk) => {
        const r = fk.reference();
        return { name: fk.getName(), columns: names(r.columns), table: tableName(r.foreignTable), foreignColumns: names(r.foreignColumns), onDelete: fk.onDelete ?? NO_ACTION, onUpdate: fk.onUpdate ?? NO_ACTION };
      }),
    ),
    checks: config.checks.map((c) => c.name).sort(),
  };
}

const sqliteTables = Object.entries(sqlite).filter(([, v]) => is(v, SQLiteTable)) as [string, SQLiteTable][];
const pgTables = Object.entries(pg).filter(([, v]) => is(v, PgTable)) as [string, PgTable][];
const sqliteShape = (t: SQLiteTable) => shapeOf(sqliteTableConfig(t), SQLITE_TYPES, (f) => sqliteTableConfig(f as SQLiteTable).name);
const pgShape = (t: PgTable) => shapeOf(pgTableConfig(t), PG_TYPES, (f) => pgTableConfig(f as PgTable).name);

describe("the SQLite and Postgres schemas agree", () => {
  test("the same tables, exported under the same names", () => {
    expect(sqliteTables.length).toBeGreaterThan(0);
    expect(sqliteTables.map(([k, t]) => `${k}=${sqliteTableConfig(t).name}`).sort()).toEqual(pgTables.map(([k, t]) => `${k}=${pgTableConfig(t).name}`).sort());
    // Nothing else is exported: a non-table export would escape the comparison.
    expect(Object.keys(sqlite).sort()).toEqual(sqliteTables.map(([k]) => k).sort());
    expect(Object.keys(pg).sort()).toEqual(pgTables.map(([k]) => k).sort());
  });

  for (const [key, table] of sqliteTables) {
    test(`${sqliteTableConfig(table).name}: columns (name, type, nullability, default, key, uniqueness), keys, indexes`, () => {
      const twin = pgTables.find(([k]) => k === key)?.[1];
      expect(twin).toBeDefined();
      expect(sqliteShape(table)).toEqual(pgShape(twin!));
      // The TypeScript property names too: queries use them.
      expect(Object.keys(getTableColumns(table)).sort()).toEqual(Object.keys(getTableColumns(twin!)).sort());
    });
  }

  test("the type pairs are tight: an unmapped column class is refused", () => {
    const fake = { name: "x", columnType: "PgBigInt64" } as unknown as Column;
    expect(() => typeOf(fake, PG_TYPES)).toThrow(/PgBigInt64 is in no pair/);
  });
});

/** The last snapshot drizzle-kit wrote for a migrations folder (the journal's last entry). */
function lastSnapshot(dir: string) {
  const journal = JSON.parse(readFileSync(join(ROOT, dir, "meta/_journal.json"), "utf8")) as { entries: { idx: number }[] };
  const last = Math.max(...journal.entries.map((e) => e.idx));
  return JSON.parse(readFileSync(join(ROOT, dir, "meta", `${String(last).padStart(4, "0")}_snapshot.json`), "utf8"));
}

describe("the migrations are in step with the schemas (else: npm run db:generate)", () => {
  test("SQLite: drizzle-kit would generate nothing new from src/db/schema/sqlite", async () => {
    expect(await generateSQLiteMigration(lastSnapshot("drizzle"), await generateSQLiteDrizzleJson(sqlite))).toEqual([]);
  });

  test("Postgres: drizzle-kit would generate nothing new from src/db/schema/pg", async () => {
    expect(await generateMigration(lastSnapshot("drizzle-pg"), generateDrizzleJson(pg))).toEqual([]);
  });

  test("src/db/migrations.gen.ts embeds drizzle/ and drizzle-pg/ as they are", () => {
    expect(sqliteMigrations).toEqual(readMigrations("drizzle"));
    expect(pgMigrations).toEqual(readMigrations("drizzle-pg"));
  });
});

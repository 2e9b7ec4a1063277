import { Database } from "bun:sqlite";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import * as schema from "./schema";
import { migrations } from "./migrations.gen";

export type Db = BunSQLiteDatabase<typeof schema> & { $client: Database };

/**
 * Opens (creating if needed) the database in the data dir, in WAL mode so
 * that the CLI and readers work while the server writes, and applies any
 * embedded migration not yet applied.
 */
export function openDb(dataDir: string): Db {
  mkdirSync(dataDir, { recursive: true });
  const sqlite = new Database(join(dataDir, "offpeak.db"), { create: true, strict: true });
  sqlite.exec("PRAGMA journal_mode = WAL");
  sqlite.exec("PRAGMA busy_timeout = 5000");
  // NORMAL is durable across a process crash in WAL mode (only an OS crash
  // can lose the last transactions), and several times faster than FULL.
  sqlite.exec("PRAGMA synchronous = NORMAL");
  sqlite.exec("PRAGMA foreign_keys = ON");
  applyMigrations(sqlite);
  return drizzle(sqlite, { schema }) as Db;
}

export function applyMigrations(sqlite: Database): void {
  sqlite.exec("CREATE TABLE IF NOT EXISTS offpeak_migrations (tag TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)");
  const applied = new Set(sqlite.query<{ tag: string }, []>("SELECT tag FROM offpeak_migrations").all().map((r) => r.tag));
  for (const m of migrations) {
    if (applied.has(m.tag)) continue;
    // IMMEDIATE takes the write lock first, so two processes starting on the
    // same data dir cannot both apply a migration.
    sqlite.transaction(() => {
      const again = sqlite.query("SELECT 1 FROM offpeak_migrations WHERE tag = ?").get(m.tag);
      if (again) return;
      for (const stmt of m.statements) sqlite.exec(stmt);
      sqlite.query("INSERT INTO offpeak_migrations (tag, applied_at) VALUES (?, ?)").run(m.tag, Math.floor(Date.now() / 1000));
    }).immediate();
  }
}

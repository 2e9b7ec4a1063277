// SQLite in the data dir: the zero-config default. One connection per
// process (bun:sqlite is synchronous); the CLI may open a second process on
// the same file (WAL mode lets it read and write while the server runs).
import { Database } from "bun:sqlite";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { mkdirSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname } from "node:path";
import { fsyncEnabled, flushDelayForTests, noteDurable } from "../fsync";
import * as schema from "./schema/sqlite";
import { sqliteTables } from "./schema";
import { sqliteMigrations } from "./migrations.gen";
import { countQueries, dialectSql } from "./dialect";
import type { Db } from "./client";
import { CHECKPOINT_WORKER } from "../workers";
import type { CheckpointStart } from "./checkpoint.worker";

/** How often watchRevocations looks at data_version. */
const KEYS_POLL_MS = 250;

/**
 * Opens (creating if needed) the database file, in WAL mode so that the CLI
 * and readers work while the server writes, and applies any embedded
 * migration not yet applied.
 */
export function openSqlite(path: string, opts: { synchronous?: "NORMAL" | "FULL" } = {}): Db {
  // The server (NORMAL) checkpoints the WAL from a Worker (checkpoint.worker.ts); short CLI runs (FULL) let SQLite do it.
  const server = (opts.synchronous ?? "NORMAL") === "NORMAL";
  mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  sqlite.exec("PRAGMA journal_mode = WAL");
  sqlite.exec("PRAGMA busy_timeout = 5000");
  // NORMAL: every commit survives a process crash (it is in the WAL, in the
  // page cache), but an OS crash or power loss can lose the newest ones. The
  // commits an answer reports are made durable by syncCommits() below, off
  // the main thread. FULL (an fsync of the WAL in every commit, on the
  // calling thread) is for short CLI runs only. Why not FULL in the server:
  // it fsyncs on the main thread, for every commit, hot paths included
  // (batch progress, chat messages), and an fsync waits behind whatever the
  // disk is flushing. Measured here (ext4, 2 cores; one-row UPDATE, 100
  // commits): NORMAL 0.08 ms p50 / 0.16 max idle, 0.10 / 0.19 while a 300 MB
  // file is being written and fdatasynced (an upload, a batch's parts); FULL
  // 0.71 / 3.8 idle, but 199 ms p50 / 391 ms max under that load: the event
  // loop would stop for that long on every commit.
  sqlite.exec(`PRAGMA synchronous = ${opts.synchronous ?? "NORMAL"}`);
  sqlite.exec("PRAGMA foreign_keys = ON");
  applyMigrations(sqlite);
  let checkpointer: Worker | null = null;
  if (server && path !== ":memory:") {
    sqlite.exec("PRAGMA wal_autocheckpoint = 0");
    checkpointer = new Worker(CHECKPOINT_WORKER);
    checkpointer.postMessage({ path } satisfies CheckpointStart);
    checkpointer.unref();
  }
  const base = drizzle(sqlite, { schema, logger: countQueries("sqlite") });
  const syncer = new CommitSyncer(path);
  const dataVersion = sqlite.query<{ data_version: number }, []>("PRAGMA data_version");
  const transaction = asyncTransaction(base, sqlite);
  const watches = new Set<ReturnType<typeof setInterval>>();
  const extras = {
    engine: "sqlite" as const,
    t: sqliteTables,
    sql: dialectSql("sqlite"),
    transaction,
    grouped: <T>(body: () => Promise<T>) => transaction(() => body()),
    syncCommits: () => (fsyncEnabled() ? syncer.sync() : Promise.resolve()),
    keysVersion: () => dataVersion.get()!.data_version,
    // One machine, one file: another process's revocation (the keys CLI) is
    // a commit by another connection, which moves data_version. A pragma
    // read every 250 ms, not a query.
    watchRevocations: (listener: (keyId: string | null) => void) => {
      let seen = dataVersion.get()!.data_version;
      const timer = setInterval(() => {
        const now = dataVersion.get()!.data_version;
        if (now === seen) return;
        seen = now;
        listener(null);
      }, KEYS_POLL_MS);
      timer.unref?.();
      watches.add(timer);
      return () => {
        clearInterval(timer);
        watches.delete(timer);
      };
    },
    announceRevocation: () => Promise.resolve(),
    ping: async () => void sqlite.query("SELECT 1").get(),
    close: async () => {
      for (const w of watches) clearInterval(w);
      await checkpointer?.terminate();
      sqlite.close();
    },
  };
  // Own properties on the Drizzle instance: `transaction` shadows the
  // synchronous one of bun-sqlite (see asyncTransaction).
  return Object.assign(base, extras) as unknown as Db;
}

/**
 * Transactions with an async body, as on Postgres, on a synchronous driver.
 *
 * The body's statements run on the one connection between BEGIN IMMEDIATE
 * and COMMIT; a lock keeps a second transaction of this process from
 * starting meanwhile. Rule for callers (both dialects): a transaction's body
 * awaits only its own queries, never other I/O. On SQLite those awaits
 * settle at once (the driver is synchronous), so the body runs to its end
 * within the current turn of the event loop: no request, timer or Worker
 * message can run in the middle of it. (A promise chain already queued in
 * the same turn could; its statements would then commit with the
 * transaction.) A body that does wait on I/O is reported, so a change that
 * breaks the rule shows in the logs and in tests.
 */
function asyncTransaction(db: unknown, sqlite: Database) {
  let tail: Promise<void> = Promise.resolve();
  return async function transaction<T>(body: (tx: unknown) => Promise<T>): Promise<T> {
    const before = tail;
    let release!: () => void;
    tail = new Promise<void>((r) => (release = r));
    await before;
    let watch: ReturnType<typeof setImmediate> | null = null;
    try {
      sqlite.exec("BEGIN IMMEDIATE");
      watch = setImmediate(() => {
        process.stderr.write("offpeak: a SQLite transaction waited on I/O (its body must await only its own queries)\n" + new Error().stack + "\n");
      });
      let result: T;
      try {
        result = await body(db);
      } catch (e) {
        if (sqlite.inTransaction) sqlite.exec("ROLLBACK");
        throw e;
      }
      sqlite.exec("COMMIT");
      return result;
    } finally {
      if (watch) clearImmediate(watch);
      release();
    }
  };
}

/**
 * syncCommits() on SQLite: fdatasync of the WAL file on the thread pool.
 *
 * Why this is enough: in WAL mode a commit appends its frames, ending in a
 * commit frame, to the WAL with write(2); at synchronous=NORMAL SQLite skips
 * only the fsync after that append. An fdatasync of the WAL through our own
 * descriptor flushes the same file's pages, so every frame written before it
 * began is on disk after it, and recovery replays the WAL up to its last
 * valid commit frame. A checkpoint in between does not lose them: at NORMAL
 * SQLite fsyncs the WAL before copying frames into the database file and the
 * database file after. If the WAL is gone (the last connection closed it
 * after a checkpoint), the database file is fsynced instead. The file is
 * opened for each flush, so a WAL recreated meanwhile is the one flushed.
 *
 * Calls coalesce (group commit): a caller whose commit came while a flush
 * was running waits for the next one, which then serves every caller that
 * arrived meanwhile. Other requests may read a record in the few
 * milliseconds between its commit and this flush; the answer of the request
 * that made it waits for the flush.
 */
class CommitSyncer {
  private running: Promise<void> | null = null;
  private next: Promise<void> | null = null;
  constructor(private readonly path: string) {}

  sync(): Promise<void> {
    if (!this.running) {
      const p = this.flush();
      this.running = p;
      const clear = () => {
        if (this.running === p) this.running = null;
      };
      p.then(clear, clear);
      return p;
    }
    // The running flush may have started before this caller's commit.
    return (this.next ??= this.running
      .catch(() => {})
      .then(() => {
        this.next = null;
        return this.sync();
      }));
  }

  private async flush(): Promise<void> {
    if (!this.path || this.path === ":memory:") return;
    await flushDelayForTests();
    let f;
    let which = `${this.path}-wal`;
    try {
      f = await open(which, "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      which = this.path;
      f = await open(which, "r");
    }
    try {
      await f.datasync();
    } finally {
      await f.close();
    }
    noteDurable("db", which);
  }
}

function applyMigrations(sqlite: Database): void {
  sqlite.exec("CREATE TABLE IF NOT EXISTS offpeak_migrations (tag TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)");
  const applied = new Set(sqlite.query<{ tag: string }, []>("SELECT tag FROM offpeak_migrations").all().map((r) => r.tag));
  for (const m of sqliteMigrations) {
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

// The server's SQLite connection never checkpoints the WAL itself (a
// checkpoint fsyncs, and on the HTTP thread an fsync behind a busy disk
// stops every request): a Worker with its own connection does
// (src/db/checkpoint.worker.ts). The CLI's short-lived FULL connections keep
// SQLite's own autocheckpoint.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openSqlite } from "../src/db/sqlite";
import { pollUntil } from "./helpers/batches";

const dir = mkdtempSync(join(tmpdir(), "offpeak-ckpt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("the server's connection has autocheckpoint off; the Worker copies a grown WAL into the database file", async () => {
  const path = join(dir, "server.db");
  const db = openSqlite(path);
  try {
    const raw = (db as unknown as { $client: import("bun:sqlite").Database }).$client;
    expect(raw.query("PRAGMA wal_autocheckpoint").get()).toEqual({ wal_autocheckpoint: 0 });
    const before = statSync(path).size;
    // ≈8 MB of WAL: past the Worker's threshold (4 MiB), far past SQLite's default autocheckpoint.
    const now = Math.floor(Date.now() / 1000);
    const pad = "x".repeat(4000);
    for (let i = 0; i < 2000; i++)
      await db.insert(db.t.files).values({ id: `file-${i}`, project: "p", filename: pad, purpose: "batch", bytes: 1, status: "processed", createdAt: now });
    // (Its connection would not copy it: autocheckpoint is off.) The Worker does, soon.
    await pollUntil(async () => statSync(path).size, (size) => size > before + 4_000_000, 10_000, 50, "the checkpoint");
  } finally {
    await db.close();
  }
});

test("a CLI connection (synchronous FULL) keeps SQLite's autocheckpoint", async () => {
  const db = openSqlite(join(dir, "cli.db"), { synchronous: "FULL" });
  try {
    const raw = (db as unknown as { $client: import("bun:sqlite").Database }).$client;
    expect(raw.query("PRAGMA wal_autocheckpoint").get()).toEqual({ wal_autocheckpoint: 1000 });
  } finally {
    await db.close();
  }
});

// Postgres (SPEC §14): the records of a cluster of nodes. Bun's built-in SQL
// client through drizzle-orm/bun-sql; a pool of connections per node.
import { SQL } from "bun";
import { drizzle } from "drizzle-orm/bun-sql";
import * as schema from "./schema/pg";
import { pgTables } from "./schema";
import { pgMigrations } from "./migrations.gen";
import { countQueries, dialectSql } from "./dialect";
import type { Db } from "./client";

/** Any 64-bit number that no other user of the database takes: "offpeak" in ASCII. */
const MIGRATION_LOCK = 0x6f66667065616bn;
const KEYS_POLL_MS = 250;

export async function openPostgres(url: string): Promise<Db> {
  const client = new SQL({ url, max: Number(process.env.OFFPEAK_PG_POOL ?? 10), idleTimeout: 30 });
  await applyMigrations(client);
  const base = drizzle({ client, schema, logger: countQueries("postgres") });

  // Revocations by other nodes: a key is never un-revoked, so the number of
  // revoked keys grows with every revocation. Polled, never per request.
  let revoked = await countRevoked(client);
  let polling = false;
  const poll = setInterval(() => {
    if (polling) return;
    polling = true;
    countRevoked(client)
      .then((n) => (revoked = n))
      .catch(() => {})
      .finally(() => (polling = false));
  }, KEYS_POLL_MS);
  poll.unref?.();

  const extras = {
    engine: "postgres" as const,
    t: pgTables,
    sql: dialectSql("postgres"),
    // Every commit is durable when it returns (synchronous_commit = on, the default).
    syncCommits: () => Promise.resolve(),
    grouped: <T>(body: () => Promise<T>) => body(),
    keysVersion: () => revoked,
    ping: async () => void (await client`SELECT 1`),
    close: async () => {
      clearInterval(poll);
      await client.close({ timeout: 5 });
    },
  };
  return Object.assign(base, extras) as unknown as Db;
}

async function countRevoked(client: SQL): Promise<number> {
  const [row] = await client`SELECT count(*)::int AS n FROM api_keys WHERE revoked_at IS NOT NULL`;
  return row.n as number;
}

/**
 * Applies the embedded migrations not yet applied, holding a session-level
 * advisory lock on one reserved connection: nodes started together wait for
 * each other, and the second finds the work done. Each migration commits
 * with its row in offpeak_migrations (Postgres DDL is transactional).
 */
async function applyMigrations(client: SQL): Promise<void> {
  const conn = await client.reserve();
  try {
    await conn`SELECT pg_advisory_lock(${MIGRATION_LOCK.toString()}::bigint)`;
    try {
      await conn`CREATE TABLE IF NOT EXISTS offpeak_migrations (tag text PRIMARY KEY, applied_at bigint NOT NULL)`;
      const applied = new Set((await conn`SELECT tag FROM offpeak_migrations`).map((r: { tag: string }) => r.tag));
      for (const m of pgMigrations) {
        if (applied.has(m.tag)) continue;
        await conn.begin(async (tx) => {
          for (const stmt of m.statements) await tx.unsafe(stmt);
          await tx`INSERT INTO offpeak_migrations (tag, applied_at) VALUES (${m.tag}, ${Math.floor(Date.now() / 1000)})`;
        });
      }
    } finally {
      await conn`SELECT pg_advisory_unlock(${MIGRATION_LOCK.toString()}::bigint)`;
    }
  } finally {
    conn.release();
  }
}

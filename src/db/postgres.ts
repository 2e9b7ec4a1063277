// Postgres (docs/CONTRACT.md §14): the records of a cluster of nodes. Bun's built-in SQL
// client through drizzle-orm/bun-sql; a pool of connections per node.
import { SQL } from "bun";
import { drizzle } from "drizzle-orm/bun-sql";
import * as schema from "./schema/pg";
import { pgTables } from "./schema";
import { pgMigrations } from "./migrations.gen";
import { countQueries, dialectSql } from "./dialect";
import type { Db, StartWait } from "./client";
import { DatabaseUnavailable, databaseUnavailable } from "./unavailable";

/** Any 64-bit number that no other user of the database takes: "offpeak" in ASCII. */
const MIGRATION_LOCK = 0x6f66667065616bn;
const KEYS_POLL_MS = 250;
/** Where a revoker says which key it revoked (the payload is the key's id). */
const KEYS_CHANNEL = "offpeak_key_revoked";
/** A LISTEN that could not start is tried again after this long (once up, Bun reconnects it by itself). */
const LISTEN_RETRY_MS = 5000;
/**
 * Seconds a new connection may take before the query that needed it fails
 * (Bun's default is 30): a database cut off the network answers a request
 * 503 after this long, not after half a minute. A refused connection (a
 * server restarting) fails at once anyway.
 */
const CONNECT_TIMEOUT_S = 5;

/** Connections a node keeps to Postgres at most, unless OFFPEAK_PG_POOL says otherwise (docs/OPERATING.md "Running a cluster"). */
export const POSTGRES_POOL = 10;

export async function openPostgres(url: string, wait?: StartWait, pool = POSTGRES_POOL): Promise<Db> {
  const client = new SQL({ url, max: pool, idleTimeout: 30, connectionTimeout: CONNECT_TIMEOUT_S });
  let revoked: number;
  try {
    revoked = await untilReachable(url, wait, async () => {
      await applyMigrations(client);
      return countRevoked(client);
    });
  } catch (e) {
    await client.close({ timeout: 0 }).catch(() => {});
    throw e;
  }
  const base = drizzle({ client, schema, logger: countQueries("postgres") });

  const keys = new RevocationWatch(client, revoked);
  const extras = {
    engine: "postgres" as const,
    t: pgTables,
    sql: dialectSql("postgres"),
    // Every commit is durable when it returns (synchronous_commit = on, the default).
    syncCommits: () => Promise.resolve(),
    grouped: <T>(body: () => Promise<T>) => body(),
    keysVersion: () => keys.version,
    watchRevocations: (listener: (keyId: string | null) => void) => keys.watch(listener),
    announceRevocation: (keyId: string) => client.notify(KEYS_CHANNEL, keyId),
    ping: async () => void (await client`SELECT 1`),
    close: async () => {
      await keys.stop();
      await client.close({ timeout: 5 });
    },
  };
  return Object.assign(base, extras) as unknown as Db;
}

/**
 * Revocations by other nodes and by the keys CLI. The revoker NOTIFYs the
 * key's id (announceRevocation), which the watchers here hear within
 * milliseconds on one dedicated connection (Bun's sql.listen), opened by the
 * first watcher — a server, never a CLI run. Notices sent while that
 * connection is down are lost, so the count of revoked keys is polled as
 * well (a key is never un-revoked, so the count grows with each revocation):
 * a change, or the connection coming back, tells the watchers "something
 * changed" (null) and they look for themselves. Each of these moves
 * `version`, which empties the verifiers' caches on their next request.
 */
class RevocationWatch {
  version = 0;
  private readonly listeners = new Set<(keyId: string | null) => void>();
  private readonly poll: ReturnType<typeof setInterval>;
  private polling = false;
  private subscription: Promise<SQL.ListenSubscription | null> | null = null;
  private retry: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly client: SQL,
    private revokedCount: number,
  ) {
    this.poll = setInterval(() => this.check(), KEYS_POLL_MS);
    this.poll.unref?.();
  }

  watch(listener: (keyId: string | null) => void): () => void {
    this.listeners.add(listener);
    this.subscription ??= this.listen();
    return () => void this.listeners.delete(listener);
  }

  async stop(): Promise<void> {
    clearInterval(this.poll);
    if (this.retry) clearTimeout(this.retry);
    this.listeners.clear();
    await (await this.subscription?.catch(() => null))?.unlisten().catch(() => {});
  }

  /** `onlisten` runs after the first LISTEN and after every reconnect: what was sent in between is looked for. */
  private listen(): Promise<SQL.ListenSubscription | null> {
    return this.client.listen(KEYS_CHANNEL, (keyId) => this.tell(keyId || null), () => this.tell(null)).catch(() => {
      // Postgres unreachable at the moment: the poll still covers, and LISTEN is tried again.
      this.retry = setTimeout(() => {
        this.retry = null;
        this.subscription = this.listeners.size ? this.listen() : null;
      }, LISTEN_RETRY_MS);
      this.retry.unref?.();
      return null;
    });
  }

  private check(): void {
    if (this.polling) return;
    this.polling = true;
    countRevoked(this.client)
      .then((n) => {
        if (n === this.revokedCount) return;
        this.revokedCount = n;
        this.tell(null);
      })
      .catch(() => {})
      .finally(() => (this.polling = false));
  }

  private tell(keyId: string | null): void {
    this.version++;
    for (const l of this.listeners) {
      try {
        l(keyId);
      } catch {
        // A listener's failure is its own; the others still hear.
      }
    }
  }
}

/**
 * Runs `body` until it gets past the database being unavailable (a node
 * started before its database, or during a restart: docs/CONTRACT.md §17), with backoff
 * (0.25 s doubling to 5 s) for at most `wait.ms` in all, telling `wait.log`
 * at each try; then it gives up with a DatabaseUnavailable that says so.
 * Without `wait` (the keys CLI) the first failure is the answer. Any other
 * error (a wrong password, a migration that fails) ends it at once.
 */
async function untilReachable<T>(url: string, wait: StartWait | undefined, body: () => Promise<T>): Promise<T> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await body();
    } catch (e) {
      const down = databaseUnavailable(e);
      if (!down) throw e;
      const waited = Date.now() - started;
      const delay = Math.min(250 * 2 ** (attempt - 1), 5000);
      const where = redactUrl(url);
      if (!wait || waited + delay > wait.ms)
        throw new DatabaseUnavailable(`could not reach the database at ${where}${wait ? ` within ${Math.round(wait.ms / 1000)} s` : ""}: ${down.message}`, { cause: e });
      wait.log("waiting for the database", { database: where, attempt, waited_ms: waited, retry_in_ms: delay, error: down.message });
      await Bun.sleep(delay);
    }
  }
}

/** The URL without its password, for messages. */
const redactUrl = (url: string) => url.replace(/:\/\/([^:@/]*):[^@/]*@/, "://$1:***@");

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

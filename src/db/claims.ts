// Claiming batch work (SPEC §14): the one query whose SQL differs most
// between the dialects. A claim makes pending shards of running batches
// (in_progress or cancelling; oldest batch first) `running` under a lease
// for one owner, and counts the run (claims + 1: its checkpoints and its
// part object are named for it).
//
// Postgres: one statement claims up to `limit` shards; the rows it picks are
// locked FOR UPDATE SKIP LOCKED, so nodes claiming at once never wait for
// each other or pick the same shard. SQLite (one writer at a time): the
// candidates are read, then each is taken with an update that only succeeds
// if it is still pending.
import { and, eq, getTableColumns, inArray, sql } from "drizzle-orm";
import type { BatchRow, ShardRow } from "./schema";
import type { Db } from "./client";

export interface ClaimedShard {
  shard: ShardRow;
  batch: BatchRow;
}

const RUNNABLE = ["in_progress", "cancelling"];

export async function claimShards(db: Db, owner: string, until: number, limit: number): Promise<ClaimedShard[]> {
  if (limit <= 0) return [];
  return db.engine === "postgres" ? claimSkipLocked(db, owner, until, limit) : claimOneByOne(db, owner, until, limit);
}

async function claimSkipLocked(db: Db, owner: string, until: number, limit: number): Promise<ClaimedShard[]> {
  const { batchShards: s, batches: b } = db.t;
  // A CTE, not `WHERE (…) IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`:
  // Postgres may run such a subquery more than once, each time skipping the
  // rows it just locked, and so update more than n rows (seen: a node with
  // one Worker claimed 6 shards, and 5 of them never ran). A CTE with a
  // row lock is never inlined: it runs once.
  const picked = db.$with("picked").as(
    db
      .select({ batchId: s.batchId, idx: s.idx })
      .from(s)
      .innerJoin(b, eq(b.id, s.batchId))
      .where(and(eq(s.status, "pending"), inArray(b.status, RUNNABLE)))
      .orderBy(b.seq, s.idx)
      .limit(limit)
      .for("update", { of: s, skipLocked: true }),
  );
  const shards = await db
    .with(picked)
    .update(s)
    .set({ status: "running", leaseOwner: owner, leaseExpiresAt: until, claims: sql`${s.claims} + 1` })
    .from(picked)
    .where(and(eq(s.batchId, picked.batchId), eq(s.idx, picked.idx)))
    .returning(getTableColumns(s));
  if (shards.length === 0) return [];
  const rows = await db.select().from(b).where(inArray(b.id, [...new Set(shards.map((x) => x.batchId))]));
  const byId = new Map(rows.map((r) => [r.id, r]));
  return shards
    .map((shard) => ({ shard, batch: byId.get(shard.batchId)! }))
    .sort((x, y) => x.batch.seq - y.batch.seq || x.shard.idx - y.shard.idx);
}

const pendingOf = new WeakMap<Db, ReturnType<typeof preparePending>>();

/** Prepared once per database: built per tick, Drizzle's query building cost ≈1 ms of the HTTP thread. */
function preparePending(db: Db) {
  const { batchShards: s, batches: b } = db.t;
  return db
    .select({ shard: s, batch: b })
    .from(s)
    .innerJoin(b, eq(b.id, s.batchId))
    .where(and(eq(s.status, "pending"), inArray(b.status, RUNNABLE)))
    .orderBy(b.seq, s.idx)
    .limit(sql.placeholder("limit"))
    .prepare("claims_pending");
}

async function claimOneByOne(db: Db, owner: string, until: number, limit: number): Promise<ClaimedShard[]> {
  const s = db.t.batchShards;
  let pending = pendingOf.get(db);
  if (!pending) pendingOf.set(db, (pending = preparePending(db)));
  const out: ClaimedShard[] = [];
  for (const { shard, batch } of await pending.execute({ limit })) {
    const [taken] = await db
      .update(s)
      .set({ status: "running", leaseOwner: owner, leaseExpiresAt: until, claims: sql`${s.claims} + 1` })
      .where(and(eq(s.batchId, shard.batchId), eq(s.idx, shard.idx), eq(s.status, "pending")))
      .returning();
    if (taken) out.push({ shard: taken, batch });
  }
  return out;
}

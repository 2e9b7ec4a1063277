// A batch shard's status, written here and nowhere else. A shard lives
// through these states (docs/CONTRACT.md §14, §18):
//
//   cut        → validating   its row is made when the batch's input is cut
//   validated  → pending      its lines checked, the batch runs
//   claimed    pending → running, under one node's lease (claims + 1)
//   released   running → pending, given back by its node (a stop, a shutdown)
//   lapsed     running → pending, its owner dead (any node may take it)
//   done       running → done, with its exact totals, by its lease's owner
//
// A shard's rows go with their batch (finalization, a failed validation),
// not by a status. Each transition is conditioned the way a cluster needs:
// only the lease's owner ends or gives back a shard, a claim only takes a
// shard that is still pending, so two nodes never run one shard at once.
import { and, eq, isNull, sql } from "drizzle-orm";
import type { Db, Queryable } from "../db/client";
import type { ShardRow, Tables } from "../db/schema";
import type { ShardTotals } from "./types";

/** cut: a batch's shards, made anew (any earlier rows of the batch go) in `validating`. */
export async function shardsCut(tx: Queryable, t: Tables, batchId: string, cuts: { start: number; end: number }[]): Promise<void> {
  const s = t.batchShards;
  await tx.delete(s).where(eq(s.batchId, batchId));
  for (let i = 0; i < cuts.length; i += 500)
    await tx.insert(s).values(cuts.slice(i, i + 500).map((c, j) => ({ batchId, idx: i + j, startByte: c.start, endByte: c.end, status: "validating" as const })));
}

/**
 * validated, on SQLite: one prepared statement for all of a batch's shards
 * (built per row, 690 updates held the HTTP thread 83 ms at 10M lines).
 * Prepared once with the runner's tick queries (src/batches/tickQueries.ts).
 */
export function prepareShardValidated(db: Db) {
  const s = db.t.batchShards;
  return db
    .update(s)
    .set({ status: "pending", firstLine: sql`${sql.placeholder("firstLine")}`, requests: sql`${sql.placeholder("requests")}` })
    .where(and(eq(s.batchId, sql.placeholder("batchId")), eq(s.idx, sql.placeholder("idx"))))
    .prepare("tick_shardValidated");
}

export type ShardValidatedStatement = ReturnType<typeof prepareShardValidated>;

/**
 * validated: every shard of the batch pending, with its first line and its
 * requests, inside the caller's transaction. On SQLite the prepared
 * statement runs on the one connection, inside that transaction; on
 * Postgres each shard's update goes through `tx` (one statement each: they
 * interleave with other work, never one long stall).
 */
export async function shardsValidated(db: Db, tx: Queryable, prepared: ShardValidatedStatement, batchId: string, rows: { idx: number; firstLine: number; requests: number }[]): Promise<void> {
  if (db.engine === "sqlite") {
    for (const r of rows) await prepared.execute({ batchId, idx: r.idx, firstLine: r.firstLine, requests: r.requests });
    return;
  }
  const s = db.t.batchShards;
  for (const r of rows)
    await tx
      .update(s)
      .set({ status: "pending", firstLine: r.firstLine, requests: r.requests })
      .where(and(eq(s.batchId, batchId), eq(s.idx, r.idx)));
}

/** claimed: the shard, if still pending, runs under `owner`'s lease until `until` (ms); its run counted. The row, or null if another node took it. */
export async function shardClaimed(db: Db, batchId: string, idx: number, owner: string, until: number): Promise<ShardRow | null> {
  const s = db.t.batchShards;
  const [taken] = await db
    .update(s)
    .set({ status: "running", leaseOwner: owner, leaseExpiresAt: until, claims: sql`${s.claims} + 1` })
    .where(and(eq(s.batchId, batchId), eq(s.idx, idx), eq(s.status, "pending")))
    .returning();
  return (taken as ShardRow | undefined) ?? null;
}

/** released: a shard `owner` holds goes back to pending (only while `owner` holds its lease). */
export async function shardReleased(db: Db, batchId: string, idx: number, owner: string): Promise<void> {
  const s = db.t.batchShards;
  await db
    .update(s)
    .set({ status: "pending", leaseOwner: null, leaseExpiresAt: null })
    .where(and(eq(s.batchId, batchId), eq(s.idx, idx), eq(s.leaseOwner, owner)));
}

/** released, at shutdown: every shard still running under `owner` goes back to pending. */
export async function shardsOfOwnerReleased(db: Db, owner: string): Promise<void> {
  const s = db.t.batchShards;
  await db
    .update(s)
    .set({ status: "pending", leaseOwner: null, leaseExpiresAt: null })
    .where(and(eq(s.leaseOwner, owner), eq(s.status, "running")));
}

/** lapsed: a running shard whose owner (`owner`, as it was read; null: none) is dead goes back to pending, unless another node took it meanwhile. */
export async function shardLapsed(db: Db, batchId: string, idx: number, owner: string | null): Promise<void> {
  const s = db.t.batchShards;
  await db
    .update(s)
    .set({ status: "pending", leaseOwner: null, leaseExpiresAt: null })
    .where(and(eq(s.batchId, batchId), eq(s.idx, idx), eq(s.status, "running"), owner ? eq(s.leaseOwner, owner) : isNull(s.leaseOwner)));
}

/**
 * done: a running shard's exact totals once its Worker has written and
 * flushed all of it, only while `owner` still holds its lease. True if it
 * is done now (by this write, or by an earlier try of it whose answer was
 * lost with the connection); false if the lease was lost: another node
 * runs the shard.
 */
export async function shardDone(db: Db, batchId: string, idx: number, totals: ShardTotals, owner: string): Promise<boolean> {
  const s = db.t.batchShards;
  const done = await db
    .update(s)
    .set({ status: "done", leaseOwner: null, leaseExpiresAt: null, ...totals })
    .where(and(eq(s.batchId, batchId), eq(s.idx, idx), eq(s.status, "running"), eq(s.leaseOwner, owner)))
    .returning({ idx: s.idx });
  if (done.length > 0) return true;
  const [row] = await db.select({ status: s.status }).from(s).where(and(eq(s.batchId, batchId), eq(s.idx, idx)));
  return row?.status === "done";
}

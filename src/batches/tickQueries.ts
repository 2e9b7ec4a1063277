// The queries the batch runner makes on every tick (5 a second), built and
// prepared once. Built on each call, Drizzle's query building and SQLite's
// statement preparation cost ≈2 ms a tick on an idle server — a stall of the
// HTTP thread that shows up in interactive tail latency. Placeholders carry
// what changes between ticks.
import { and, eq, inArray, isNull, lt, or, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { prepareShardValidated } from "./shardStatus";

export type TickQueries = ReturnType<typeof prepareTickQueries>;

export function prepareTickQueries(db: Db, owner: string) {
  const { batches, batchShards: s } = db.t;
  const { greatest, sumNumber } = db.sql;
  return {
    /** Batches past their deadline get stopReason "expired" (params: now, in seconds + 1). */
    markExpired: db
      .update(batches)
      // (A batch being stopped is not waiting for anything: status_details and its estimate go, docs/CONTRACT.md §18.)
      .set({ stopReason: "expired", estimatedCompletionAt: null, statusDetailsCode: null, statusDetailsMessage: null, statusDetailsSince: null })
      .where(and(inArray(batches.status, ["validating", "in_progress"]), isNull(batches.stopReason), lt(batches.expiresAt, sql.placeholder("before"))))
      .prepare("tick_markExpired"),

    renewShardLeases: db
      .update(s)
      .set({ leaseExpiresAt: sql`${sql.placeholder("until")}` })
      .where(and(eq(s.leaseOwner, owner), eq(s.status, "running")))
      .prepare("tick_renewShardLeases"),

    renewBatchLeases: db
      .update(batches)
      .set({ leaseExpiresAt: sql`${sql.placeholder("until")}` })
      .where(eq(batches.leaseOwner, owner))
      .prepare("tick_renewBatchLeases"),

    /** A shard validated: ready to run (src/batches/shardStatus.ts). */
    shardValidated: prepareShardValidated(db),

    runningShards: db
      .select({ batchId: s.batchId, idx: s.idx, owner: s.leaseOwner, exp: s.leaseExpiresAt })
      .from(s)
      .where(eq(s.status, "running"))
      .prepare("tick_runningShards"),

    /** Validating, or cancelled before its shards were validated. */
    waitingValidation: db
      .select()
      .from(batches)
      .where(
        or(
          eq(batches.status, "validating"),
          and(eq(batches.status, "cancelling"), sql`NOT EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} <> 'validating')`),
        ),
      )
      .prepare("tick_waitingValidation"),

    /** Running batches with shards running or pending, with both counts (cluster-wide): the batch order as yields see it (runner/yields.ts). */
    orderCounts: db
      .select({
        id: batches.id,
        project: batches.project,
        expiresAt: batches.expiresAt,
        seq: batches.seq,
        running: sql<number>`(SELECT count(*) FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} = 'running')`.mapWith(Number),
        pending: sql<number>`(SELECT count(*) FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} = 'pending')`.mapWith(Number),
      })
      .from(batches)
      .where(and(inArray(batches.status, ["in_progress", "cancelling"]), sql`EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} IN ('running', 'pending'))`))
      .prepare("tick_orderCounts"),

    /** Batches whose shards are all done. */
    readyToFinalize: db
      .select()
      .from(batches)
      .where(
        and(
          inArray(batches.status, ["in_progress", "cancelling", "finalizing"]),
          sql`EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id})`,
          sql`NOT EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} <> 'done')`,
        ),
      )
      .prepare("tick_readyToFinalize"),

    /** A running shard's counts, never lowered (a Worker's totals can lag what is already stored). */
    shardCounts: db
      .update(s)
      .set({
        completed: greatest(s.completed, sql.placeholder("completed")),
        failed: greatest(s.failed, sql.placeholder("failed")),
        inputTokens: greatest(s.inputTokens, sql.placeholder("inputTokens")),
        cachedTokens: greatest(s.cachedTokens, sql.placeholder("cachedTokens")),
        outputTokens: greatest(s.outputTokens, sql.placeholder("outputTokens")),
        reasoningTokens: greatest(s.reasoningTokens, sql.placeholder("reasoningTokens")),
        costAmount: greatest(s.costAmount, sql.placeholder("costAmount")),
      })
      .where(and(eq(s.batchId, sql.placeholder("batchId")), eq(s.idx, sql.placeholder("idx")), eq(s.status, "running"), eq(s.leaseOwner, owner)))
      .prepare("tick_shardCounts"),

    /** Sums of the counts and usage over a batch's shards (param: id). */
    shardSums: db
      .select({
        completed: sumNumber(s.completed),
        failed: sumNumber(s.failed),
        inputTokens: sumNumber(s.inputTokens),
        cachedTokens: sumNumber(s.cachedTokens),
        outputTokens: sumNumber(s.outputTokens),
        reasoningTokens: sumNumber(s.reasoningTokens),
        costAmount: sumNumber(s.costAmount),
      })
      .from(s)
      .where(eq(s.batchId, sql.placeholder("id")))
      .prepare("tick_shardSums"),

    /** A batch's counts and usage, only while it runs: finalization writes the final sums and deletes the shards. */
    batchCounts: db
      .update(batches)
      .set({
        completed: sql`${sql.placeholder("completed")}`,
        failed: sql`${sql.placeholder("failed")}`,
        inputTokens: sql`${sql.placeholder("inputTokens")}`,
        cachedTokens: sql`${sql.placeholder("cachedTokens")}`,
        outputTokens: sql`${sql.placeholder("outputTokens")}`,
        reasoningTokens: sql`${sql.placeholder("reasoningTokens")}`,
        costAmount: sql`${sql.placeholder("costAmount")}`,
      })
      .where(and(eq(batches.id, sql.placeholder("id")), inArray(batches.status, ["in_progress", "cancelling"])))
      .prepare("tick_batchCounts"),
  };
}

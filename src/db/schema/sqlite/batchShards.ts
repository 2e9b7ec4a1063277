import { sqliteTable, text, integer, real, primaryKey, index } from "drizzle-orm/sqlite-core";

/**
 * A byte range of a batch's input file, the unit of work that a runner
 * claims with a lease. Its results live in part files on disk
 * (batches/<batch>/out-<idx>.jsonl, err-<idx>.jsonl), which are the truth
 * for which lines are done; the counters here are a checkpoint of them.
 */
export const batchShards = sqliteTable(
  "batch_shards",
  {
    batchId: text("batch_id").notNull(),
    idx: integer("idx").notNull(),
    startByte: integer("start_byte").notNull(),
    endByte: integer("end_byte").notNull(),
    /** 1-based number of the shard's first line in the input file (set by validation). */
    firstLine: integer("first_line"),
    requests: integer("requests"),
    /** pending | running | done */
    status: text("status").notNull(),
    leaseOwner: text("lease_owner"),
    leaseExpiresAt: integer("lease_expires_at"),
    /** Times the shard was claimed to run: names the bucket checkpoints of each run (worker/checkpoints.ts). */
    claims: integer("claims").notNull().default(0),
    completed: integer("completed").notNull().default(0),
    failed: integer("failed").notNull().default(0),
    inputTokens: integer("input_tokens").notNull().default(0),
    cachedTokens: integer("cached_tokens").notNull().default(0),
    outputTokens: integer("output_tokens").notNull().default(0),
    reasoningTokens: integer("reasoning_tokens").notNull().default(0),
    costAmount: real("cost_amount").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.batchId, t.idx] }), index("batch_shards_status").on(t.status)],
);

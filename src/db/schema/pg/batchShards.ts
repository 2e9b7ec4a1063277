import { pgTable, text, bigint, doublePrecision, primaryKey, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/batchShards.ts. */
export const batchShards = pgTable(
  "batch_shards",
  {
    batchId: text("batch_id").notNull(),
    idx: bigint("idx", { mode: "number" }).notNull(),
    startByte: bigint("start_byte", { mode: "number" }).notNull(),
    endByte: bigint("end_byte", { mode: "number" }).notNull(),
    firstLine: bigint("first_line", { mode: "number" }),
    requests: bigint("requests", { mode: "number" }),
    status: text("status").notNull(),
    leaseOwner: text("lease_owner"),
    leaseExpiresAt: bigint("lease_expires_at", { mode: "number" }),
    claims: bigint("claims", { mode: "number" }).notNull().default(0),
    completed: bigint("completed", { mode: "number" }).notNull().default(0),
    failed: bigint("failed", { mode: "number" }).notNull().default(0),
    inputTokens: bigint("input_tokens", { mode: "number" }).notNull().default(0),
    cachedTokens: bigint("cached_tokens", { mode: "number" }).notNull().default(0),
    outputTokens: bigint("output_tokens", { mode: "number" }).notNull().default(0),
    reasoningTokens: bigint("reasoning_tokens", { mode: "number" }).notNull().default(0),
    costAmount: doublePrecision("cost_amount").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.batchId, t.idx] }), index("batch_shards_status").on(t.status)],
);

import { sqliteTable, text, integer, real, index } from "drizzle-orm/sqlite-core";

export const batches = sqliteTable(
  "batches",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    endpoint: text("endpoint").notNull(),
    model: text("model"),
    inputFileId: text("input_file_id").notNull(),
    completionWindow: text("completion_window").notNull(),
    status: text("status").notNull(),
    /** Why a running batch is being stopped: "cancelled" | "expired" (null while it runs normally). */
    stopReason: text("stop_reason"),
    errors: text("errors", { mode: "json" }).$type<{ code: string; message: string; param: string | null; line: number | null }[]>(),
    outputFileId: text("output_file_id"),
    errorFileId: text("error_file_id"),
    createdAt: integer("created_at").notNull(),
    inProgressAt: integer("in_progress_at"),
    expiresAt: integer("expires_at").notNull(),
    finalizingAt: integer("finalizing_at"),
    completedAt: integer("completed_at"),
    failedAt: integer("failed_at"),
    expiredAt: integer("expired_at"),
    cancellingAt: integer("cancelling_at"),
    cancelledAt: integer("cancelled_at"),
    total: integer("total").notNull().default(0),
    completed: integer("completed").notNull().default(0),
    failed: integer("failed").notNull().default(0),
    inputTokens: integer("input_tokens").notNull().default(0),
    cachedTokens: integer("cached_tokens").notNull().default(0),
    outputTokens: integer("output_tokens").notNull().default(0),
    reasoningTokens: integer("reasoning_tokens").notNull().default(0),
    costAmount: real("cost_amount").notNull().default(0),
    metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
    /** Which API made it and shows it: null for OpenAI's Batch, "anthropic" for a Message Batch (same engine, another shape). */
    api: text("api"),
    outputExpiresAfter: integer("output_expires_after"),
    /** Lease on the batch-level phases (validating, finalizing): owner and expiry in ms. */
    leaseOwner: text("lease_owner"),
    leaseExpiresAt: integer("lease_expires_at"),
    /** docs/CONTRACT.md §18: when the batch should end at its recent rate (Unix s); null until a rate is known, and once it ends. Written by the runner running it. */
    estimatedCompletionAt: integer("estimated_completion_at"),
    /** docs/CONTRACT.md §18 status_details: why a running batch is not moving ("upstream_down", "rate_limited", "peak_hours", "queued"), its message and since when (Unix s); null while it moves and once it ends. */
    statusDetailsCode: text("status_details_code"),
    statusDetailsMessage: text("status_details_message"),
    statusDetailsSince: integer("status_details_since"),
  },
  (t) => [index("batches_project_seq").on(t.project, t.seq), index("batches_status").on(t.status)],
);

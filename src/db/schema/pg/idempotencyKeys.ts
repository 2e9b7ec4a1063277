import { pgTable, text, bigint, primaryKey, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/idempotencyKeys.ts. */
export const idempotencyKeys = pgTable(
  "idempotency_keys",
  {
    project: text("project").notNull(),
    key: text("key").notNull(),
    requestHash: text("request_hash").notNull(),
    state: text("state").notNull(),
    status: bigint("status", { mode: "number" }),
    body: text("body"),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
    expiresAt: bigint("expires_at", { mode: "number" }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.project, t.key] }), index("idempotency_keys_expires_at").on(t.expiresAt)],
);

import { pgTable, text, bigint } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/nodes.ts. */
export const nodes = pgTable("nodes", {
  id: text("id").primaryKey(),
  startedAt: bigint("started_at", { mode: "number" }).notNull(),
  lastSeen: bigint("last_seen", { mode: "number" }).notNull(),
  shards: bigint("shards", { mode: "number" }).notNull().default(0),
  stoppedAt: bigint("stopped_at", { mode: "number" }),
});

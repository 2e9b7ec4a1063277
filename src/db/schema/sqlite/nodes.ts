import { sqliteTable, text, integer } from "drizzle-orm/sqlite-core";

/**
 * The processes serving this database (docs/CONTRACT.md §14): each heartbeats its row.
 * A node is live while last_seen is within batches.lease_ms; the cluster's
 * limits are shared among live nodes, and /status lists them.
 */
export const nodes = sqliteTable("nodes", {
  /** The runner's lease owner: host:pid:nonce. */
  id: text("id").primaryKey(),
  /** Seconds since epoch. */
  startedAt: integer("started_at").notNull(),
  /** ms since epoch. */
  lastSeen: integer("last_seen").notNull(),
  /** Shards this node was running at its last heartbeat. */
  shards: integer("shards").notNull().default(0),
  /** Seconds since epoch: set on a clean stop (the row is kept a while for /status). */
  stoppedAt: integer("stopped_at"),
});

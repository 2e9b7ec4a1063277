import { sqliteTable, text, integer, primaryKey } from "drizzle-orm/sqlite-core";

/**
 * A cluster's per-key counts (SPEC §14): each node's requests and tokens
 * of a key in one wall-clock minute, published a few times a second by
 * src/nodes/keyUsage.ts so that rpm/tpm hold for the cluster. Rows of past
 * minutes are deleted. (Created on SQLite too, where one node needs none.)
 */
export const keyUsage = sqliteTable(
  "key_usage",
  {
    keyId: text("key_id").notNull(),
    nodeId: text("node_id").notNull(),
    /** ms since epoch, a multiple of 60,000. */
    windowStart: integer("window_start").notNull(),
    requests: integer("requests").notNull(),
    tokens: integer("tokens").notNull(),
    /** What the node may still admit until its next sync (its allowance not yet used): the others leave it to it. */
    reservedRequests: integer("reserved_requests").notNull().default(0),
    reservedTokens: integer("reserved_tokens").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.windowStart, t.keyId, t.nodeId] })],
);

import { sqliteTable, text, integer, primaryKey } from "drizzle-orm/sqlite-core";

/**
 * A cluster's per-key budgets (docs/CONTRACT.md §14): for a key in one wall-clock
 * minute, the row with node_id "*" holds what the nodes have taken of its
 * rpm/tpm (src/nodes/keyUsage.ts takes blocks of it atomically, so that
 * rpm/tpm hold for the cluster). Rows of past minutes are deleted.
 * (Created on SQLite too, where one node needs none.)
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
    /** What the last statement on the row gave its node (read back with RETURNING). */
    reservedRequests: integer("reserved_requests").notNull().default(0),
    reservedTokens: integer("reserved_tokens").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.windowStart, t.keyId, t.nodeId] })],
);

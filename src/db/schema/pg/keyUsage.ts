import { pgTable, text, bigint, primaryKey } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/keyUsage.ts. */
export const keyUsage = pgTable(
  "key_usage",
  {
    keyId: text("key_id").notNull(),
    nodeId: text("node_id").notNull(),
    windowStart: bigint("window_start", { mode: "number" }).notNull(),
    requests: bigint("requests", { mode: "number" }).notNull(),
    tokens: bigint("tokens", { mode: "number" }).notNull(),
    reservedRequests: bigint("reserved_requests", { mode: "number" }).notNull().default(0),
    reservedTokens: bigint("reserved_tokens", { mode: "number" }).notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.windowStart, t.keyId, t.nodeId] })],
);

import { sqliteTable, text, integer, primaryKey, index } from "drizzle-orm/sqlite-core";

/**
 * `Idempotency-Key` on a POST that makes something (files, uploads, batches,
 * message batches): the first request with a key takes the row (`pending`),
 * and its answer is kept (`done`) so that the same key and request within
 * 24 h answer the same, on any node. The primary key makes two requests
 * arriving together race on one insert, which only one wins.
 */
export const idempotencyKeys = sqliteTable(
  "idempotency_keys",
  {
    project: text("project").notNull(),
    key: text("key").notNull(),
    /** SHA-256 (hex) of method, route and body: the same key with another request is refused. */
    requestHash: text("request_hash").notNull(),
    /** pending | done */
    state: text("state").notNull(),
    /** The first answer's HTTP status and JSON body, once done. */
    status: integer("status"),
    body: text("body"),
    /** ms since epoch: a pending row older than the request deadline is taken over. */
    createdAt: integer("created_at").notNull(),
    /** Seconds since epoch. */
    expiresAt: integer("expires_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.project, t.key] }), index("idempotency_keys_expires_at").on(t.expiresAt)],
);

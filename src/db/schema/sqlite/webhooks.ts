import { sqliteTable, text, integer, index } from "drizzle-orm/sqlite-core";

/** Where a project's batch events are delivered (docs/CONTRACT.md §12). */
export const webhookEndpoints = sqliteTable(
  "webhook_endpoints",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    url: text("url").notNull(),
    events: text("events", { mode: "json" }).notNull().$type<string[]>(),
    /**
     * `whsec_…`: kept as it is, because the server signs with it (a hash
     * could not sign). Shown once, never listed, never logged.
     */
    secret: text("secret").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("webhook_endpoints_project").on(t.project, t.seq)],
);

/**
 * The outbox: one row per event and endpoint, written in the same
 * transaction as the batch's final state, delivered (at least once) by the
 * background sender.
 */
export const webhookEvents = sqliteTable(
  "webhook_events",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    /** `evt_…`: the `webhook-id` of every attempt. */
    id: text("id").notNull().unique(),
    endpointId: text("endpoint_id").notNull(),
    type: text("type").notNull(),
    /** The exact body sent on every attempt. */
    payload: text("payload").notNull(),
    /** pending | delivered | failed (gave up after 72 h) */
    status: text("status").notNull(),
    attempts: integer("attempts").notNull().default(0),
    /** ms since epoch. */
    nextAttemptAt: integer("next_attempt_at").notNull(),
    /** Unix seconds, as every created_at (migration 0010 converts rows written in ms). */
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("webhook_events_due").on(t.status, t.nextAttemptAt), index("webhook_events_endpoint_due").on(t.endpointId, t.status, t.nextAttemptAt)],
);

/** Every delivery attempt, for GET /webhook_endpoints/{id}/deliveries. */
export const webhookAttempts = sqliteTable(
  "webhook_attempts",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    eventId: text("event_id").notNull(),
    endpointId: text("endpoint_id").notNull(),
    type: text("type").notNull(),
    attempt: integer("attempt").notNull(),
    statusCode: integer("status_code"),
    error: text("error"),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("webhook_attempts_endpoint").on(t.endpointId, t.seq)],
);

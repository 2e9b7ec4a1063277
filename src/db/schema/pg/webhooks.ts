import { pgTable, text, bigint, bigserial, jsonb, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/webhooks.ts. */
export const webhookEndpoints = pgTable(
  "webhook_endpoints",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    url: text("url").notNull(),
    events: jsonb("events").notNull().$type<string[]>(),
    secret: text("secret").notNull(),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("webhook_endpoints_project").on(t.project, t.seq)],
);

export const webhookEvents = pgTable(
  "webhook_events",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull().unique(),
    endpointId: text("endpoint_id").notNull(),
    type: text("type").notNull(),
    payload: text("payload").notNull(),
    status: text("status").notNull(),
    attempts: bigint("attempts", { mode: "number" }).notNull().default(0),
    /** ms since epoch. */
    nextAttemptAt: bigint("next_attempt_at", { mode: "number" }).notNull(),
    /** Unix seconds, as every created_at. */
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("webhook_events_due").on(t.status, t.nextAttemptAt), index("webhook_events_endpoint_due").on(t.endpointId, t.status, t.nextAttemptAt)],
);

export const webhookAttempts = pgTable(
  "webhook_attempts",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    eventId: text("event_id").notNull(),
    endpointId: text("endpoint_id").notNull(),
    type: text("type").notNull(),
    attempt: bigint("attempt", { mode: "number" }).notNull(),
    statusCode: bigint("status_code", { mode: "number" }),
    error: text("error"),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("webhook_attempts_endpoint").on(t.endpointId, t.seq)],
);

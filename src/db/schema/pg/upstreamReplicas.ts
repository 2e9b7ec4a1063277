import { pgTable, text, bigint, doublePrecision, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/upstreamReplicas.ts. */
export const upstreamReplicas = pgTable(
  "upstream_replicas",
  {
    id: text("id").primaryKey(),
    upstream: text("upstream").notNull(),
    baseUrl: text("base_url").notNull(),
    weight: doublePrecision("weight").notNull().default(1),
    state: text("state").notNull(),
    source: text("source").notNull(),
    updatedAt: bigint("updated_at", { mode: "number" }).notNull(),
  },
  (t) => [index("upstream_replicas_upstream").on(t.upstream)],
);

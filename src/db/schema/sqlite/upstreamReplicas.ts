import { sqliteTable, text, integer, real, index } from "drizzle-orm/sqlite-core";

/**
 * The engines behind an upstream that differ from its config: replicas
 * added through the API (`source` = api), and the state an operator set on
 * any replica, a config one included (its id is derived from its URL, so it
 * is the same across restarts). Every node reads this table, so a change
 * made on one reaches the others (docs/CONTRACT.md §21).
 */
export const upstreamReplicas = sqliteTable(
  "upstream_replicas",
  {
    id: text("id").primaryKey(),
    upstream: text("upstream").notNull(),
    baseUrl: text("base_url").notNull(),
    weight: real("weight").notNull().default(1),
    /** active | draining | removed (removed rows hide a config replica; api ones are deleted once drained) */
    state: text("state").notNull(),
    /** config | api | dns */
    source: text("source").notNull(),
    /** ms since epoch: nodes re-read the set when the newest changes. */
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [index("upstream_replicas_upstream").on(t.upstream)],
);

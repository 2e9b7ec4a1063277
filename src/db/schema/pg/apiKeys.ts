import { pgTable, text, bigint, jsonb } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/apiKeys.ts (same columns, same meaning). */
export const apiKeys = pgTable("api_keys", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  project: text("project").notNull(),
  scopes: jsonb("scopes").$type<string[]>().notNull(),
  hash: text("hash").notNull().unique(),
  prefix: text("prefix").notNull(),
  rpm: bigint("rpm", { mode: "number" }),
  tpm: bigint("tpm", { mode: "number" }),
  createdAt: bigint("created_at", { mode: "number" }).notNull(),
  revokedAt: bigint("revoked_at", { mode: "number" }),
});

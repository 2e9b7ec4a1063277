import { sqliteTable, text, integer } from "drizzle-orm/sqlite-core";

export const apiKeys = sqliteTable("api_keys", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  project: text("project").notNull(),
  /** JSON array of scope strings. */
  scopes: text("scopes", { mode: "json" }).$type<string[]>().notNull(),
  /** SHA-256 of the secret, hex. The secret itself is never stored. */
  hash: text("hash").notNull().unique(),
  /** First characters of the key, for humans telling keys apart. */
  prefix: text("prefix").notNull(),
  rpm: integer("rpm"),
  tpm: integer("tpm"),
  createdAt: integer("created_at").notNull(),
  revokedAt: integer("revoked_at"),
});

import { sqliteTable, text, integer, index } from "drizzle-orm/sqlite-core";

export const files = sqliteTable(
  "files",
  {
    /** Insertion order: the cursor for pagination (created_at has only 1 s resolution). */
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    filename: text("filename").notNull(),
    purpose: text("purpose").notNull(),
    bytes: integer("bytes").notNull(),
    status: text("status").notNull(),
    statusDetails: text("status_details"),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at"),
    /** Requests in a batch input file (null for other purposes). */
    lineCount: integer("line_count"),
    /** Parts of a composed file (rows in file_parts); null: one blob under the file's id. */
    parts: integer("parts"),
  },
  (t) => [index("files_project_seq").on(t.project, t.seq), index("files_expires_at").on(t.expiresAt)],
);

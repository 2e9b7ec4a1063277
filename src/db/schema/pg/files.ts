import { pgTable, text, bigint, bigserial, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/files.ts. */
export const files = pgTable(
  "files",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    filename: text("filename").notNull(),
    purpose: text("purpose").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    status: text("status").notNull(),
    statusDetails: text("status_details"),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
    expiresAt: bigint("expires_at", { mode: "number" }),
    lineCount: bigint("line_count", { mode: "number" }),
    parts: bigint("parts", { mode: "number" }),
  },
  (t) => [index("files_project_seq").on(t.project, t.seq), index("files_expires_at").on(t.expiresAt)],
);

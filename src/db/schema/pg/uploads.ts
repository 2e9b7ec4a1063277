import { pgTable, text, bigint, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/uploads.ts. */
export const uploads = pgTable(
  "uploads",
  {
    id: text("id").primaryKey(),
    project: text("project").notNull(),
    filename: text("filename").notNull(),
    purpose: text("purpose").notNull(),
    mimeType: text("mime_type").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    status: text("status").notNull(),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
    expiresAt: bigint("expires_at", { mode: "number" }).notNull(),
    fileId: text("file_id").notNull(),
    fileExpiresAfter: bigint("file_expires_after", { mode: "number" }),
  },
  (t) => [index("uploads_project").on(t.project), index("uploads_status_expires_at").on(t.status, t.expiresAt)],
);

/** Postgres twin of ../sqlite/uploads.ts's uploadParts. */
export const uploadParts = pgTable(
  "upload_parts",
  {
    id: text("id").primaryKey(),
    uploadId: text("upload_id")
      .notNull()
      .references(() => uploads.id, { onDelete: "cascade" }),
    key: text("key").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("upload_parts_upload_id").on(t.uploadId)],
);

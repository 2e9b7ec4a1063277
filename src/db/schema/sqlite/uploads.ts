import { sqliteTable, text, integer, index } from "drizzle-orm/sqlite-core";

/**
 * OpenAI Uploads (docs/CONTRACT.md §22, src/uploads/): a file sent in parts.
 * `fileId` is chosen at creation: the parts are stored as parts of that
 * (composed) blob, so completing makes the File of those very parts without
 * moving a byte, and removing the blob `fileId` removes every part.
 */
export const uploads = sqliteTable(
  "uploads",
  {
    id: text("id").primaryKey(),
    project: text("project").notNull(),
    filename: text("filename").notNull(),
    purpose: text("purpose").notNull(),
    mimeType: text("mime_type").notNull(),
    /** The size the client declared: the parts named at completion must add up to it. */
    bytes: integer("bytes").notNull(),
    /** pending | completed | cancelled | expired */
    status: text("status").notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
    /** The File's id (made at completion under this id). */
    fileId: text("file_id").notNull(),
    /** expires_after.seconds for the File, or null. */
    fileExpiresAfter: integer("file_expires_after"),
  },
  (t) => [index("uploads_project").on(t.project), index("uploads_status_expires_at").on(t.status, t.expiresAt)],
);

/** The parts of a pending upload: a blob each, under `key`. A completed upload's parts are its File's file_parts. */
export const uploadParts = sqliteTable(
  "upload_parts",
  {
    id: text("id").primaryKey(),
    uploadId: text("upload_id")
      .notNull()
      .references(() => uploads.id, { onDelete: "cascade" }),
    key: text("key").notNull(),
    bytes: integer("bytes").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("upload_parts_upload_id").on(t.uploadId)],
);

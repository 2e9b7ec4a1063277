import { sqliteTable, text, integer, primaryKey } from "drizzle-orm/sqlite-core";
import { files } from "./files";

/**
 * The parts of a composed file (a batch's output or error file): its bytes
 * are its parts' bytes in `idx` order. A part is a blob in the store under
 * `key` (on disk `files/<file_id>.parts/<idx>`; on an object store, an object),
 * so finalizing a batch writes these rows and moves no bytes. Empty parts
 * are not listed. Deleting the file deletes its rows (cascade) and the
 * store removes the blobs.
 */
export const fileParts = sqliteTable(
  "file_parts",
  {
    fileId: text("file_id")
      .notNull()
      .references(() => files.id, { onDelete: "cascade" }),
    /** Order in the file (a batch's shard index: gaps where a shard wrote nothing). */
    idx: integer("idx").notNull(),
    key: text("key").notNull(),
    bytes: integer("bytes").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fileId, t.idx] })],
);

import { pgTable, text, bigint, primaryKey } from "drizzle-orm/pg-core";
import { files } from "./files";

/** Postgres twin of ../sqlite/fileParts.ts. */
export const fileParts = pgTable(
  "file_parts",
  {
    fileId: text("file_id")
      .notNull()
      .references(() => files.id, { onDelete: "cascade" }),
    idx: bigint("idx", { mode: "number" }).notNull(),
    key: text("key").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.fileId, t.idx] })],
);

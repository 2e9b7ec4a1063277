import { pgTable, text, bigint, bigserial, jsonb, index } from "drizzle-orm/pg-core";

/** Postgres twin of ../sqlite/chats.ts. */
export const chats = pgTable(
  "chats",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    model: text("model").notNull(),
    system: text("system"),
    metadata: jsonb("metadata").$type<Record<string, string>>(),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("chats_project_seq").on(t.project, t.seq)],
);

export const chatMessages = pgTable(
  "chat_messages",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull().unique(),
    chatId: text("chat_id")
      .notNull()
      .references(() => chats.id, { onDelete: "cascade" }),
    role: text("role").notNull(),
    content: text("content").notNull(),
    createdAt: bigint("created_at", { mode: "number" }).notNull(),
  },
  (t) => [index("chat_messages_chat_seq").on(t.chatId, t.seq)],
);

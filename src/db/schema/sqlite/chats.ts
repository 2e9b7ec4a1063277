import { sqliteTable, text, integer, index } from "drizzle-orm/sqlite-core";

export const chats = sqliteTable(
  "chats",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull().unique(),
    project: text("project").notNull(),
    model: text("model").notNull(),
    system: text("system"),
    metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("chats_project_seq").on(t.project, t.seq)],
);

export const chatMessages = sqliteTable(
  "chat_messages",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull().unique(),
    chatId: text("chat_id")
      .notNull()
      .references(() => chats.id, { onDelete: "cascade" }),
    role: text("role").notNull(),
    content: text("content").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("chat_messages_chat_seq").on(t.chatId, t.seq)],
);

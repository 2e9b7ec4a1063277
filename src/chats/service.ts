// Persisted conversations: records and history. Streaming a reply is in stream.ts.
import { checkMetadata } from "../metadata";
import { and, asc, desc, eq, lt } from "drizzle-orm";
import type { AppContext } from "../context";
import { chatMessages, chats } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { isId, newId, nowSeconds } from "../ids";
import { resolveModel } from "../inference/admission";
import { chatCompletions } from "../endpoints/chatCompletions";

export type ChatRow = typeof chats.$inferSelect;

export function chatView(ctx: AppContext, row: ChatRow, withMessages = true) {
  const messages = withMessages
    ? ctx.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.chatId, row.id))
        .orderBy(asc(chatMessages.seq))
        .all()
        .map((m) => ({ id: m.id, role: m.role, content: m.content, created_at: m.createdAt }))
    : undefined;
  return { id: row.id, object: "chat" as const, model: row.model, system: row.system ?? null, metadata: row.metadata ?? null, created_at: row.createdAt, ...(messages ? { messages } : {}) };
}

export function createChat(ctx: AppContext, project: string, input: { model: string; system?: string | null; metadata?: unknown }) {
  resolveModel(ctx, input.model, chatCompletions);
  const metadata = checkMetadata(input.metadata);
  const row = ctx.db
    .insert(chats)
    .values({ id: newId("chat_"), project, model: input.model, system: input.system ?? null, metadata, createdAt: nowSeconds() })
    .returning()
    .get();
  return chatView(ctx, row);
}

export function getChat(ctx: AppContext, project: string, id: string): ChatRow {
  if (!isId("chat_", id)) throw notFound("chat", id);
  const row = ctx.db.select().from(chats).where(and(eq(chats.id, id), eq(chats.project, project))).get();
  if (!row) throw notFound("chat", id);
  return row;
}

export function listChats(ctx: AppContext, project: string, limit: number, after?: string) {
  const conds = [eq(chats.project, project)];
  if (after) {
    const cursor = isId("chat_", after) ? ctx.db.select({ seq: chats.seq }).from(chats).where(and(eq(chats.id, after), eq(chats.project, project))).get() : undefined;
    if (!cursor) throw new ApiError("invalid_value", `after: no chat with id '${after.slice(0, 80)}'`, { param: "after" });
    conds.push(lt(chats.seq, cursor.seq));
  }
  const rows = ctx.db.select().from(chats).where(and(...conds)).orderBy(desc(chats.seq)).limit(limit + 1).all();
  const hasMore = rows.length > limit;
  const data = (hasMore ? rows.slice(0, limit) : rows).map((r) => chatView(ctx, r, false));
  return { object: "list" as const, data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: hasMore };
}

export function deleteChat(ctx: AppContext, project: string, id: string) {
  const row = getChat(ctx, project, id);
  ctx.db.delete(chats).where(eq(chats.id, row.id)).run();
  return { id: row.id, object: "chat.deleted" as const, deleted: true as const };
}

export function chatExists(ctx: AppContext, id: string): boolean {
  return ctx.db.select({ id: chats.id }).from(chats).where(eq(chats.id, id)).get() !== undefined;
}

export function addMessage(ctx: AppContext, chatId: string, role: "user" | "assistant", content: string) {
  return ctx.db.insert(chatMessages).values({ id: newId("msg_"), chatId, role, content, createdAt: nowSeconds() }).returning().get();
}

export function history(ctx: AppContext, chat: ChatRow): { role: string; content: string }[] {
  const msgs = ctx.db.select().from(chatMessages).where(eq(chatMessages.chatId, chat.id)).orderBy(asc(chatMessages.seq)).all();
  return [...(chat.system ? [{ role: "system", content: chat.system }] : []), ...msgs.map((m) => ({ role: m.role, content: m.content }))];
}

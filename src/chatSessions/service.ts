// Persisted conversations: records and history. Streaming a reply is in stream.ts.
import { checkMetadata } from "../metadata";
import { and, asc, desc, eq, lt } from "drizzle-orm";
import type { AppContext } from "../context";
import type { ChatRow } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { isId, newId, nowSeconds } from "../ids";
import { resolveModel } from "../inference/admission/admit";
import { chatCompletions } from "../endpoints/chatCompletions";

export type { ChatRow };

export async function chatView(ctx: AppContext, row: ChatRow, withMessages = true) {
  const { chatMessages } = ctx.db.t;
  const messages = withMessages
    ? (await ctx.db.select().from(chatMessages).where(eq(chatMessages.chatId, row.id)).orderBy(asc(chatMessages.seq))).map((m) => ({
        id: m.id,
        role: m.role,
        content: m.content,
        created_at: m.createdAt,
      }))
    : undefined;
  return { id: row.id, object: "chat" as const, model: row.model, system: row.system ?? null, metadata: row.metadata ?? null, created_at: row.createdAt, ...(messages ? { messages } : {}) };
}

export async function createChat(ctx: AppContext, project: string, input: { model: string; system?: string | null; metadata?: unknown }) {
  resolveModel(ctx, input.model, chatCompletions);
  const metadata = checkMetadata(input.metadata);
  const [row] = await ctx.db
    .insert(ctx.db.t.chats)
    .values({ id: newId("chat_"), project, model: input.model, system: input.system ?? null, metadata, createdAt: nowSeconds() })
    .returning();
  return chatView(ctx, row!);
}

export async function getChat(ctx: AppContext, project: string, id: string): Promise<ChatRow> {
  if (!isId("chat_", id)) throw notFound("chat", id);
  const { chats } = ctx.db.t;
  const [row] = await ctx.db.select().from(chats).where(and(eq(chats.id, id), eq(chats.project, project)));
  if (!row) throw notFound("chat", id);
  return row;
}

export async function listChats(ctx: AppContext, project: string, limit: number, after?: string) {
  const { chats } = ctx.db.t;
  const conds = [eq(chats.project, project)];
  if (after) {
    const [cursor] = isId("chat_", after) ? await ctx.db.select({ seq: chats.seq }).from(chats).where(and(eq(chats.id, after), eq(chats.project, project))) : [];
    if (!cursor) throw new ApiError("invalid_value", `after: no chat with id '${after.slice(0, 80)}'`, { param: "after" });
    conds.push(lt(chats.seq, cursor.seq));
  }
  const rows = await ctx.db.select().from(chats).where(and(...conds)).orderBy(desc(chats.seq)).limit(limit + 1);
  const hasMore = rows.length > limit;
  const data = await Promise.all((hasMore ? rows.slice(0, limit) : rows).map((r) => chatView(ctx, r, false)));
  return { object: "list" as const, data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: hasMore };
}

export async function deleteChat(ctx: AppContext, project: string, id: string) {
  const row = await getChat(ctx, project, id);
  await ctx.db.delete(ctx.db.t.chats).where(eq(ctx.db.t.chats.id, row.id));
  return { id: row.id, object: "chat.deleted" as const, deleted: true as const };
}

export async function chatExists(ctx: AppContext, id: string): Promise<boolean> {
  const { chats } = ctx.db.t;
  return (await ctx.db.select({ id: chats.id }).from(chats).where(eq(chats.id, id))).length > 0;
}

export async function addMessage(ctx: AppContext, chatId: string, role: "user" | "assistant", content: string) {
  const [row] = await ctx.db.insert(ctx.db.t.chatMessages).values({ id: newId("msg_"), chatId, role, content, createdAt: nowSeconds() }).returning();
  return row!;
}

export async function history(ctx: AppContext, chat: ChatRow): Promise<{ role: string; content: string }[]> {
  const { chatMessages } = ctx.db.t;
  const msgs = await ctx.db.select().from(chatMessages).where(eq(chatMessages.chatId, chat.id)).orderBy(asc(chatMessages.seq));
  return [...(chat.system ? [{ role: "system", content: chat.system }] : []), ...msgs.map((m) => ({ role: m.role, content: m.content }))];
}

// Message batches' records (docs/CONTRACT.md §22): read, list, cancel and
// delete, each on the batch row of a message batch (api "anthropic") of
// the key's project. An OpenAI batch's id is not a message batch's (a 404
// here), and the OpenAI routes do not list message batches
// (src/batches/service.ts listBatches).
import { and, asc, desc, eq, gt, inArray, lt } from "drizzle-orm";
import type { AppContext } from "../../context";
import type { BatchRow } from "../../db/schema";
import { ApiError, notFound } from "../../errors";
import { cancelBatch } from "../../batches/service";
import { batchIdOf, messageBatchId } from "./ids";
import { forgetStopped } from "./stopped";
import { isEnded, messageBatchView, type MessageBatch } from "./view";

const API = "anthropic";

export async function getMessageBatch(ctx: AppContext, project: string, id: string): Promise<BatchRow> {
  const batchId = batchIdOf(id);
  if (!batchId) throw notFound("message batch", id);
  const { batches } = ctx.db.t;
  const [row] = await ctx.db
    .select()
    .from(batches)
    .where(and(eq(batches.id, batchId), eq(batches.project, project), eq(batches.api, API)));
  if (!row) throw notFound("message batch", id);
  return row;
}

export interface ListQuery {
  limit: number;
  beforeId?: string;
  afterId?: string;
}

/**
 * Newest first, as Anthropic lists them: `after_id` pages to older batches,
 * `before_id` to newer ones (the `limit` nearest the cursor, still newest
 * first); has_more says whether more lie further that way.
 */
export async function listMessageBatches(ctx: AppContext, project: string, root: string, q: ListQuery) {
  const { batches } = ctx.db.t;
  if (q.beforeId && q.afterId) throw new ApiError("invalid_value", "give before_id or after_id, not both", { param: "before_id" });
  const conds = [eq(batches.project, project), eq(batches.api, API)];
  const cursorId = q.beforeId ?? q.afterId;
  if (cursorId) {
    const param = q.beforeId ? "before_id" : "after_id";
    const batchId = batchIdOf(cursorId);
    const [cursor] = batchId ? await ctx.db.select({ seq: batches.seq }).from(batches).where(and(eq(batches.id, batchId), ...conds)) : [];
    if (!cursor) throw new ApiError("invalid_value", `${param}: no message batch with id '${cursorId.slice(0, 80)}'`, { param });
    conds.push(q.beforeId ? gt(batches.seq, cursor.seq) : lt(batches.seq, cursor.seq));
  }
  const rows = await ctx.db
    .select()
    .from(batches)
    .where(and(...conds))
    .orderBy(q.beforeId ? asc(batches.seq) : desc(batches.seq))
    .limit(q.limit + 1);
  const hasMore = rows.length > q.limit;
  const page = hasMore ? rows.slice(0, q.limit) : rows;
  if (q.beforeId) page.reverse();
  const data: MessageBatch[] = [];
  for (const r of page) data.push(await messageBatchView(ctx, r, root));
  return { data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null };
}

/** The batch's cancel (src/batches/service.ts): answered `canceling`, or as it is once ended. */
export async function cancelMessageBatch(ctx: AppContext, project: string, id: string): Promise<BatchRow> {
  const row = await getMessageBatch(ctx, project, id);
  // Anthropic answers a cancel of an ended batch with the batch as it is.
  if (isEnded(row) || row.status === "finalizing") return row;
  return cancelBatch(ctx, project, row.id);
}

/** Only an ended batch: its row and its files (input, output, error) go; the bytes after the commit is on disk. */
export async function deleteMessageBatch(ctx: AppContext, project: string, id: string) {
  const row = await getMessageBatch(ctx, project, id);
  if (!isEnded(row)) throw new ApiError("invalid_value", `Message batch ${id} is still processing (${row.status}); cancel it and wait for it to end before deleting it`);
  const { batches, files, fileParts } = ctx.db.t;
  const fileIds = [row.inputFileId, row.outputFileId, row.errorFileId].filter((f): f is string => !!f);
  await ctx.db.transaction(async (tx) => {
    await tx.delete(batches).where(and(eq(batches.id, row.id), eq(batches.api, API)));
    // The input file may serve another batch too (an OpenAI client that found it in the files list): it stays then.
    const others = await tx.select({ id: batches.id }).from(batches).where(eq(batches.inputFileId, row.inputFileId)).limit(1);
    const gone = others.length ? fileIds.filter((f) => f !== row.inputFileId) : fileIds;
    if (gone.length) {
      await tx.delete(fileParts).where(inArray(fileParts.fileId, gone));
      await tx.delete(files).where(and(inArray(files.id, gone), eq(files.project, project)));
    }
  });
  await ctx.db.syncCommits();
  for (const f of fileIds) {
    const [kept] = await ctx.db.select({ id: files.id }).from(files).where(eq(files.id, f));
    if (!kept) ctx.store.delete(f);
  }
  forgetStopped(row.id);
  return { id: messageBatchId(row.id), type: "message_batch_deleted" as const };
}

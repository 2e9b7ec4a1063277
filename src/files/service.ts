import { and, asc, desc, eq, gt, isNotNull, lt, lte, or, isNull } from "drizzle-orm";
import type { AppContext } from "../context";
import type { FileRow } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { isId, nowSeconds } from "../ids";

export const UPLOAD_PURPOSES = ["batch", "fine-tune", "assistants", "vision", "user_data", "evals"] as const;
export type { FileRow };

export function fileView(row: FileRow) {
  return {
    id: row.id,
    object: "file" as const,
    bytes: row.bytes,
    created_at: row.createdAt,
    filename: row.filename,
    purpose: row.purpose,
    status: row.status,
    expires_at: row.expiresAt ?? null,
    status_details: row.statusDetails ?? null,
  };
}

const notExpired = (ctx: AppContext, now: number) => or(isNull(ctx.db.t.files.expiresAt), gt(ctx.db.t.files.expiresAt, now));

/** The file, if it exists in this project and has not expired; else 404. */
export async function getFile(ctx: AppContext, project: string, id: string, param: string | null = null): Promise<FileRow> {
  if (!isId("file-", id)) throw notFound("file", id, param);
  const { files } = ctx.db.t;
  const [row] = await ctx.db
    .select()
    .from(files)
    .where(and(eq(files.id, id), eq(files.project, project), notExpired(ctx, nowSeconds())));
  if (!row) throw notFound("file", id, param);
  return row;
}

export interface ListFilesQuery {
  purpose?: string;
  limit: number;
  order: "asc" | "desc";
  after?: string;
}

export async function listFiles(ctx: AppContext, project: string, q: ListFilesQuery) {
  const { files } = ctx.db.t;
  const conds = [eq(files.project, project), notExpired(ctx, nowSeconds())];
  if (q.purpose) conds.push(eq(files.purpose, q.purpose));
  if (q.after) {
    const [cursor] = isId("file-", q.after)
      ? await ctx.db.select({ seq: files.seq }).from(files).where(and(eq(files.id, q.after), eq(files.project, project)))
      : [];
    if (!cursor) throw new ApiError("invalid_value", `after: no file with id '${q.after.slice(0, 80)}'`, { param: "after" });
    conds.push(q.order === "asc" ? gt(files.seq, cursor.seq) : lt(files.seq, cursor.seq));
  }
  const rows = await ctx.db
    .select()
    .from(files)
    .where(and(...conds))
    .orderBy(q.order === "asc" ? asc(files.seq) : desc(files.seq))
    .limit(q.limit + 1);
  const hasMore = rows.length > q.limit;
  const page = hasMore ? rows.slice(0, q.limit) : rows;
  return {
    object: "list" as const,
    data: page.map(fileView),
    first_id: page[0]?.id ?? null,
    last_id: page[page.length - 1]?.id ?? null,
    has_more: hasMore,
  };
}

/** Hooks other resources register to veto deleting a file they still read (batches: 409). */
export type FileDeleteGuard = (ctx: AppContext, fileId: string) => Promise<string | null>;
const deleteGuards: FileDeleteGuard[] = [];
export const addFileDeleteGuard = (g: FileDeleteGuard) => deleteGuards.push(g);

export async function deleteFile(ctx: AppContext, project: string, id: string) {
  const row = await getFile(ctx, project, id);
  for (const guard of deleteGuards) {
    const why = await guard(ctx, row.id);
    if (why) throw new ApiError("invalid_state", why);
  }
  await ctx.db.delete(ctx.db.t.files).where(eq(ctx.db.t.files.id, row.id));
  // The deletion is on disk before the bytes go: an OS crash must not bring
  // back a record whose bytes were removed.
  await ctx.db.syncCommits();
  ctx.store.delete(row.id);
  return { id: row.id, object: "file" as const, deleted: true as const };
}

async function guarded(ctx: AppContext, id: string): Promise<boolean> {
  for (const g of deleteGuards) if (await g(ctx, id)) return true;
  return false;
}

/** Deletes files whose expires_at has passed: rows first, then bytes. */
export async function sweepExpiredFiles(ctx: AppContext): Promise<number> {
  const { files } = ctx.db.t;
  const now = nowSeconds();
  let deleted = 0;
  // Pages of 1000 in id order: files a guard keeps (the input of a running
  // batch) are stepped over, so they cannot hide the expired files after them.
  let after = "";
  for (;;) {
    const page = await ctx.db
      .select({ id: files.id })
      .from(files)
      .where(and(isNotNull(files.expiresAt), lte(files.expiresAt, now), gt(files.id, after)))
      .orderBy(asc(files.id))
      .limit(1000);
    for (const { id } of page) {
      if (await guarded(ctx, id)) continue;
      await ctx.db.delete(files).where(eq(files.id, id));
      ctx.store.delete(id);
      deleted++;
    }
    if (page.length < 1000) return deleted;
    after = page[page.length - 1]!.id;
  }
}

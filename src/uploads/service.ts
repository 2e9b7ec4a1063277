// OpenAI Uploads (docs/CONTRACT.md §22): a file too big for one request, sent
// in parts. An upload is made with its final size and purpose, takes parts
// (./parts.ts) and is completed (./complete.ts) into a File, or cancelled.
//
// Where the bytes go: the File's id is chosen when the upload is made, and
// every part is stored as a part of that composed blob
// (BlobStore.createPartWriter): completing writes the File's record and its
// file_parts rows, naming the parts as they lie (no byte is copied), and
// removing the blob `fileId` (cancel, expiry, or the File's deletion later)
// removes every part at once. Part records live in the database, the bytes
// in the store, so any node of a cluster may take any part.
//
// The upload's row is the lock: a part's record, a completion and a cancel
// each change it with a conditional update (status still `pending`, not
// expired), so of a completion and a cancel that race only one wins, and a
// part that arrives after either is refused and its bytes removed.
import { and, eq, gt, lte, ne } from "drizzle-orm";
import type { AppContext } from "../context";
import type { UploadRow } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { fileView, getFile, UPLOAD_PURPOSES } from "../files/service";
import { MAX_FILENAME_CHARS } from "../files/upload";
import { isId, newId, nowSeconds } from "../ids";

export type { UploadRow };

/** An upload takes parts and completes for an hour (OpenAI's rule). */
export const UPLOAD_TTL_S = 3600;
/** What the rows of finished uploads are kept for after they expire: a late part or completion is told what became of it, not 404. */
const KEEP_FINISHED_S = 24 * 3600;
const MAX_MIME_CHARS = 255;

export interface CreateUploadBody {
  bytes: unknown;
  filename: string;
  mime_type: string;
  purpose: string;
  expires_after?: { anchor?: string; seconds?: number } | null;
}

/** The status a client sees: a pending upload past its hour is expired from that second on, before the sweep marks it. */
export const statusOf = (row: UploadRow, now = nowSeconds()): string => (row.status === "pending" && row.expiresAt <= now ? "expired" : row.status);

export async function uploadView(ctx: AppContext, row: UploadRow) {
  const status = statusOf(row);
  return {
    id: row.id,
    object: "upload" as const,
    bytes: row.bytes,
    created_at: row.createdAt,
    expires_at: row.expiresAt,
    filename: row.filename,
    purpose: row.purpose,
    status,
    // The File as GET /files/{id} shows it (null once deleted or expired).
    file: status === "completed" ? await getFile(ctx, row.project, row.fileId).then(fileView, () => null) : null,
  };
}

export async function createUpload(ctx: AppContext, project: string, body: CreateUploadBody): Promise<UploadRow> {
  if (typeof body.bytes !== "number" || !Number.isSafeInteger(body.bytes) || body.bytes < 1) throw new ApiError("invalid_value", "bytes must be a positive integer", { param: "bytes" });
  if (body.bytes > ctx.config.maxFileBytes)
    throw new ApiError("file_too_large", `The file exceeds the maximum size of ${ctx.config.maxFileBytes} bytes`, { param: "bytes" });
  if (!body.filename) throw new ApiError("invalid_value", "filename must not be empty", { param: "filename" });
  if (body.filename.length > MAX_FILENAME_CHARS) throw new ApiError("invalid_value", `the filename is longer than ${MAX_FILENAME_CHARS} characters`, { param: "filename" });
  if (!body.mime_type || body.mime_type.length > MAX_MIME_CHARS)
    throw new ApiError("invalid_value", `mime_type must be 1 to ${MAX_MIME_CHARS} characters`, { param: "mime_type" });
  if (!(UPLOAD_PURPOSES as readonly string[]).includes(body.purpose))
    throw new ApiError("invalid_value", `purpose must be one of ${UPLOAD_PURPOSES.join(", ")}`, { param: "purpose" });
  const now = nowSeconds();
  const row: UploadRow = {
    id: newId("upload_"),
    project,
    filename: body.filename,
    purpose: body.purpose,
    mimeType: body.mime_type,
    bytes: body.bytes,
    status: "pending",
    createdAt: now,
    expiresAt: now + UPLOAD_TTL_S,
    fileId: newId("file-"),
    fileExpiresAfter: fileExpiryOf(body.expires_after),
  };
  await ctx.db.insert(ctx.db.t.uploads).values(row);
  return row;
}

/** expires_after for the File (as POST /files takes it): `{anchor: "created_at", seconds: 3600..2592000}`. */
function fileExpiryOf(e: CreateUploadBody["expires_after"]): number | null {
  if (e === undefined || e === null) return null;
  if (e.anchor !== "created_at") throw new ApiError("invalid_value", "expires_after.anchor must be 'created_at'", { param: "expires_after.anchor" });
  const s = e.seconds;
  if (s === undefined || !Number.isInteger(s) || s < 3600 || s > 2592000)
    throw new ApiError("invalid_value", "expires_after.seconds must be an integer from 3600 to 2592000", { param: "expires_after.seconds" });
  return s;
}

/** The upload, if it exists in this project; else 404 (another project's id too). */
export async function getUpload(ctx: AppContext, project: string, id: string): Promise<UploadRow> {
  if (!isId("upload_", id)) throw notFound("upload", id);
  const { uploads } = ctx.db.t;
  const [row] = await ctx.db
    .select()
    .from(uploads)
    .where(and(eq(uploads.id, id), eq(uploads.project, project)));
  if (!row) throw notFound("upload", id);
  return row;
}

/** 400 unless the upload still takes parts and completion; `what`: what was refused ("add parts to", "complete", "cancel"). */
export function assertPending(row: UploadRow, what: string): void {
  const status = statusOf(row);
  if (status !== "pending") throw stateError(row, status, what);
}

const stateError = (row: UploadRow, status: string, what: string) =>
  new ApiError("invalid_value", `Cannot ${what} upload ${row.id}: it is ${status}`, { param: "upload_id" });

/** The upload read again, for a request on it that failed: its 400 if it stopped being pending meanwhile, else null. */
export async function noLongerPending(ctx: AppContext, row: UploadRow, what: string): Promise<ApiError | null> {
  const now = await getUpload(ctx, row.project, row.id).catch(() => null);
  const status = now ? statusOf(now) : "expired";
  return status === "pending" ? null : stateError(row, status, what);
}

/** The conditional update that only a pending, unexpired upload passes (and that locks its row on Postgres). */
export const whilePending = (ctx: AppContext, id: string, now = nowSeconds()) => {
  const { uploads } = ctx.db.t;
  return and(eq(uploads.id, id), eq(uploads.status, "pending"), gt(uploads.expiresAt, now));
};

export async function cancelUpload(ctx: AppContext, project: string, id: string): Promise<UploadRow> {
  const row = await getUpload(ctx, project, id);
  assertPending(row, "cancel");
  const { uploads, uploadParts } = ctx.db.t;
  const done = await ctx.db.transaction(async (tx) => {
    const [u] = await tx.update(uploads).set({ status: "cancelled" }).where(whilePending(ctx, id)).returning();
    if (u) await tx.delete(uploadParts).where(eq(uploadParts.uploadId, id));
    return u;
  });
  if (!done) throw (await noLongerPending(ctx, row, "cancel")) ?? new Error(`upload ${id}: cancel found it not pending`);
  // The records' removal is on disk before the bytes go (as a file's deletion).
  await ctx.db.syncCommits();
  ctx.store.delete(row.fileId);
  return done;
}

/**
 * Every minute (beside the files' sweep): pending uploads past their hour
 * become `expired` and their parts go; rows of finished uploads are removed
 * a day after they expired.
 */
export async function sweepExpiredUploads(ctx: AppContext): Promise<number> {
  const { uploads, uploadParts } = ctx.db.t;
  const now = nowSeconds();
  const expired = await ctx.db
    .select({ id: uploads.id, fileId: uploads.fileId })
    .from(uploads)
    .where(and(eq(uploads.status, "pending"), lte(uploads.expiresAt, now)))
    .limit(1000);
  let n = 0;
  for (const u of expired) {
    const gone = await ctx.db.transaction(async (tx) => {
      const [row] = await tx
        .update(uploads)
        .set({ status: "expired" })
        .where(and(eq(uploads.id, u.id), eq(uploads.status, "pending")))
        .returning({ id: uploads.id });
      if (row) await tx.delete(uploadParts).where(eq(uploadParts.uploadId, u.id));
      return row;
    });
    if (!gone) continue;
    await ctx.db.syncCommits();
    ctx.store.delete(u.fileId);
    n++;
  }
  // Finished long ago: the rows alone (a completed upload's bytes are its File's; the others' are gone).
  await ctx.db.delete(uploads).where(and(ne(uploads.status, "pending"), lte(uploads.expiresAt, now - KEEP_FINISHED_S)));
  return n;
}

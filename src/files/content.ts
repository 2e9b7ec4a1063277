// GET /files/{id}/content: the stored bytes, streamed from disk by Bun (the
// body is a lazily read file blob), with Content-Length and single Range; on
// S3 read through this node (BlobStore.read).
// A composed file (a batch's output or error file: its parts in order, see
// src/db/schema/*/fileParts.ts) is read as one body across its parts; bytes
// inside one part go out as that part's file blob, like a plain file.
// Every download carries Content-Length (and Content-Range for a range),
// whichever storage holds it (docs/CONTRACT.md §17): a body that is a stream (from the
// bucket, or across parts) is read before the answer (src/storage/sized.ts),
// because Bun drops the header on a streamed body. A body on the disk is
// noted as such (downloadResponse), for front threads to send it themselves.
import { eq } from "drizzle-orm";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import type { BlobLocator } from "../storage/blobStore";
import { downloadResponse } from "../storage/diskBlob";
import { withLength } from "../storage/sized";
import type { FileRow } from "./service";

export async function fileContentResponse(ctx: AppContext, row: FileRow, rangeHeader: string | null): Promise<Response> {
  const size = row.bytes;
  const body = await bodyOf(ctx, row);
  const headers: Record<string, string> = {
    "content-type": "application/octet-stream",
    "content-disposition": contentDisposition(row.filename),
    "accept-ranges": "bytes",
  };
  const range = rangeHeader ? parseRange(rangeHeader, size) : null;
  if (range === "unsatisfiable") {
    throw new ApiError("range_not_satisfiable", `Range not satisfiable for a file of ${size} bytes`, { param: "range", headers: { "content-range": `bytes */${size}` } });
  }
  if (range) {
    const [start, end] = range;
    headers["content-range"] = `bytes ${start}-${end}/${size}`;
    headers["content-length"] = String(end - start + 1);
    return downloadResponse(await withLength(body(start, end + 1), end - start + 1, ctx.config.dataDir), { status: 206, headers });
  }
  headers["content-length"] = String(size);
  return downloadResponse(await withLength(body(0, size), size, ctx.config.dataDir), { status: 200, headers });
}

/** The whole content of a stored file as a Response body that Bun sends with Content-Length (see the top of this file). */
export async function fileBodyWithLength(ctx: AppContext, row: FileRow): Promise<Blob | Uint8Array<ArrayBuffer>> {
  return withLength((await bodyOf(ctx, row))(0, row.bytes), row.bytes, ctx.config.dataDir);
}

/** The whole content of a stored file as one stream, plain or composed (e.g. to read a batch's error file). */
export async function fileStream(ctx: AppContext, row: FileRow): Promise<ReadableStream<Uint8Array>> {
  const body = (await bodyOf(ctx, row))(0, row.bytes);
  return body instanceof Blob ? body.stream() : body;
}

/** Locators of files made of parts, by id: a file's bytes never change, and a batch asks once per shard. */
const composedLocators = new Map<string, BlobLocator>();
const LOCATOR_CACHE = 64;

/**
 * Where a file's bytes lie, for a thread that reads them itself (a batch
 * Worker reading its input): the one blob, or a composed file's parts in
 * order (a File made of an Upload's parts, src/uploads/).
 */
export async function fileLocator(ctx: AppContext, fileId: string): Promise<BlobLocator> {
  const cached = composedLocators.get(fileId);
  if (cached) return cached;
  const { files, fileParts } = ctx.db.t;
  const [row] = await ctx.db.select({ parts: files.parts }).from(files).where(eq(files.id, fileId));
  if (!row || row.parts === null) return ctx.store.locate(fileId);
  const parts = await ctx.db.select({ key: fileParts.key, bytes: fileParts.bytes }).from(fileParts).where(eq(fileParts.fileId, fileId)).orderBy(fileParts.idx);
  const loc = ctx.store.locateComposed(parts);
  if (composedLocators.size >= LOCATOR_CACHE) composedLocators.delete(composedLocators.keys().next().value!);
  composedLocators.set(fileId, loc);
  return loc;
}

/** Bytes [start, end) of the file, as a Response body. */
async function bodyOf(ctx: AppContext, row: FileRow): Promise<(start: number, end: number) => Blob | ReadableStream<Uint8Array>> {
  if (row.parts === null) return (start, end) => (start === 0 && end === row.bytes ? ctx.store.read(row.id) : ctx.store.read(row.id, { start, end }));
  const { fileParts } = ctx.db.t;
  const parts = await ctx.db.select({ key: fileParts.key, bytes: fileParts.bytes }).from(fileParts).where(eq(fileParts.fileId, row.id)).orderBy(fileParts.idx);
  return (start, end) => ctx.store.readComposed(parts, start, end);
}

/** One `bytes=a-b`, `bytes=a-` or `bytes=-n` range; anything else (multi-range, other units) is ignored → full body. */
export function parseRange(header: string, size: number): [number, number] | "unsatisfiable" | null {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === "" && m[2] === "")) return null;
  let start: number;
  let end: number;
  if (m[1] === "") {
    const suffix = Number(m[2]);
    if (suffix === 0) return "unsatisfiable";
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== "" && Number(m[2]) < start) return null;
  }
  if (start >= size) return "unsatisfiable";
  return [start, end];
}

/**
 * `attachment` with the stored filename (RFC 6266): a plain-ASCII
 * `filename="…"` for old clients — anything outside printable ASCII, the
 * double quote and the backslash replaced by `_` (a raw non-Latin-1
 * character makes the Response throw, a 500; a control character makes a
 * header clients reject) — and,
 * when that lost anything, the exact name as `filename*=UTF-8''…`.
 */
export function contentDisposition(filename: string): string {
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, "_");
  if (ascii === filename) return `attachment; filename="${ascii}"`;
  const exact = encodeURIComponent(filename).replace(/['()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
  return `attachment; filename="${ascii}"; filename*=UTF-8''${exact}`;
}

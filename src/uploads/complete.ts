// POST /uploads/{id}/complete (docs/CONTRACT.md §22): the parts named, in the order
// given, become the File — its record and one file_parts row per part,
// naming the parts where they lie: no byte is copied, whatever the store.
//
// What is read first, as one stream across the parts (never whole in
// memory): a `batch` file's lines, checked exactly as a direct upload's are
// (the same validator Workers, src/files/upload.ts), and the md5 when one is
// given. A refusal (a bad line, a wrong size, a wrong md5) leaves the upload
// pending with its parts, as OpenAI leaves it: the client may send other
// parts and complete again until the upload expires. Parts uploaded but not
// named are removed once the File is made.
import { eq } from "drizzle-orm";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import type { FileRow } from "../db/schema";
import { ApiError } from "../errors";
import { fileView } from "../files/service";
import { storedChunks } from "../files/storedChunks";
import { batchLineCount, batchValidator } from "../files/upload";
import { uploadSlotsOf } from "../files/uploadSlots";
import { nowSeconds } from "../ids";
import type { ValidatorClient } from "../jsonl/validatorClient";
import type { BlobPart } from "../storage/blobStore";
import { MAX_PARTS } from "./parts";
import { assertPending, getUpload, noLongerPending, whilePending } from "./service";

export interface CompleteBody {
  part_ids: string[];
  md5?: string | null;
}

export async function completeUpload(ctx: AppContext, principal: Pick<Principal, "keyId" | "project">, id: string, body: CompleteBody) {
  const upload = await getUpload(ctx, principal.project, id);
  assertPending(upload, "complete");
  const parts = await namedParts(ctx, upload.id, upload.bytes, body.part_ids);
  const md5 = body.md5 ? body.md5.toLowerCase() : null;
  if (md5 !== null && !/^[0-9a-f]{32}$/.test(md5)) throw new ApiError("invalid_value", "md5 must be 32 hexadecimal digits", { param: "md5" });

  let lineCount: number | null = null;
  if (upload.purpose === "batch" || md5 !== null) {
    // Reading takes validator Workers (a batch file): bounded like an upload's (docs/CONTRACT.md §16).
    const giveBackSlot = upload.purpose === "batch" ? uploadSlotsOf(ctx).take(principal.keyId) : () => {};
    try {
      lineCount = await readParts(ctx, parts, upload.purpose === "batch", md5);
    } catch (e) {
      // Cancelled or expired while it was read (its parts gone): say so, not the read's failure.
      throw (e instanceof ApiError ? null : await noLongerPending(ctx, upload, "complete")) ?? e;
    } finally {
      giveBackSlot();
    }
  }

  const { uploads, uploadParts, files, fileParts } = ctx.db.t;
  const now = nowSeconds();
  const file: FileRow = {
    seq: undefined as unknown as number,
    id: upload.fileId,
    project: upload.project,
    filename: upload.filename,
    purpose: upload.purpose,
    bytes: upload.bytes,
    status: "processed",
    statusDetails: null,
    createdAt: now,
    expiresAt: upload.fileExpiresAfter === null ? null : now + upload.fileExpiresAfter,
    lineCount,
    parts: parts.length,
  };
  const named = new Set(body.part_ids);
  const unnamed = await ctx.db.transaction(async (tx) => {
    const [u] = await tx.update(uploads).set({ status: "completed" }).where(whilePending(ctx, upload.id, now)).returning();
    if (!u) return null;
    const { seq: _seq, ...values } = file;
    await tx.insert(files).values(values);
    for (let i = 0; i < parts.length; i += 500)
      await tx.insert(fileParts).values(parts.slice(i, i + 500).map((p, j) => ({ fileId: file.id, idx: i + j, key: p.key, bytes: p.bytes })));
    // The File's parts are its file_parts now; those not named go below.
    const all = await tx.select({ id: uploadParts.id, key: uploadParts.key }).from(uploadParts).where(eq(uploadParts.uploadId, upload.id));
    await tx.delete(uploadParts).where(eq(uploadParts.uploadId, upload.id));
    return all.filter((p) => !named.has(p.id));
  });
  if (unnamed === null) throw (await noLongerPending(ctx, upload, "complete")) ?? new Error(`upload ${id}: completion found it not pending`);
  await ctx.store.syncParts(file.id);
  await ctx.db.syncCommits();
  for (const p of unnamed) ctx.store.delete(p.key);
  return {
    id: upload.id,
    object: "upload" as const,
    bytes: upload.bytes,
    created_at: upload.createdAt,
    expires_at: upload.expiresAt,
    filename: upload.filename,
    purpose: upload.purpose,
    status: "completed" as const,
    file: fileView(file),
  };
}

/** The parts `ids` names, in that order: each a part of this upload, once, adding up to `bytes`; else 400. */
async function namedParts(ctx: AppContext, uploadId: string, bytes: number, ids: string[]): Promise<BlobPart[]> {
  if (ids.length === 0) throw new ApiError("invalid_value", "part_ids must name at least one part", { param: "part_ids" });
  if (ids.length > MAX_PARTS) throw new ApiError("invalid_value", `part_ids may name at most ${MAX_PARTS} parts`, { param: "part_ids" });
  const { uploadParts } = ctx.db.t;
  const rows = await ctx.db.select({ id: uploadParts.id, key: uploadParts.key, bytes: uploadParts.bytes }).from(uploadParts).where(eq(uploadParts.uploadId, uploadId));
  const byId = new Map(rows.map((r) => [r.id, r]));
  const seen = new Set<string>();
  const parts: BlobPart[] = [];
  let total = 0;
  for (const [i, pid] of ids.entries()) {
    const row = byId.get(pid);
    if (!row) throw new ApiError("invalid_value", `part_ids[${i}]: '${String(pid).slice(0, 80)}' is not a part of upload ${uploadId}`, { param: "part_ids" });
    if (seen.has(pid)) throw new ApiError("invalid_value", `part_ids[${i}]: part ${pid} is named more than once`, { param: "part_ids" });
    seen.add(pid);
    parts.push({ key: row.key, bytes: row.bytes });
    total += row.bytes;
  }
  if (total !== bytes)
    throw new ApiError("invalid_value", `The parts add up to ${total} bytes, but the upload was created with bytes=${bytes}`, { param: "part_ids" });
  return parts;
}

/** Reads the parts in order as one stream: checks a batch file's lines (its request count, or the first bad line's 400) and the md5. */
async function readParts(ctx: AppContext, parts: BlobPart[], batch: boolean, md5: string | null): Promise<number | null> {
  const total = parts.reduce((n, p) => n + p.bytes, 0);
  const stream = () => {
    const body = ctx.store.readComposed(parts, 0, total);
    return body instanceof ReadableStream ? body : body.stream();
  };
  const validator: ValidatorClient | null = batch ? batchValidator(ctx) : null;
  const hash = md5 !== null ? new Bun.CryptoHasher("md5") : null;
  try {
    // Read into one reused buffer where the parts are on the disk (../files/storedChunks.ts): memory stays flat.
    for await (const chunk of storedChunks(ctx.store.locateComposed(parts), stream)) {
      hash?.update(chunk);
      if (validator) {
        // Already bad, and no md5 to finish: the first bad line is all that is left to say.
        if (validator.failed && !hash) break;
        await validator.write(chunk);
      }
    }
    if (hash && hash.digest("hex") !== md5) throw new ApiError("invalid_value", "md5 does not match the parts' bytes", { param: "md5" });
    return validator ? await batchLineCount(validator, stream) : null;
  } finally {
    validator?.close();
  }
}

// POST /files: the multipart body streams to a temp file while a Worker checks
// batch lines; the record is inserted only when everything passed, and on any
// rejection the temp file is removed, so a failed upload leaves nothing.
// Durable before acknowledged: the answer goes out only after the bytes
// (flushed while they stream in), their name in files/, and the record's
// commit are on disk (writer.commit(), syncCommits()).
// Bounded (docs/CONTRACT.md §16): an upload takes one of the server's and its key's
// upload slots before it reads a byte (429 if none is free), and a client
// that stops sending is ended after upload_idle_timeout_s (408); either way
// nothing is stored and the upload's validator Workers are gone before its
// slot is given back.
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { newId, nowSeconds } from "../ids";
import { firstConfirmedDuplicate } from "../jsonl/duplicates";
import type { LineError } from "../jsonl/batchFileValidator";
import { ValidatorClient } from "../jsonl/validatorClient";
import { IdleReader } from "../http/idleReader";
import type { BlobWriter } from "../storage/blobStore";
import { withIdempotency, type BodyDigest } from "../idempotency";
import { digestPart } from "../idempotency/multipart";
import { boundaryOf, readMultipart, type PartInfo, type PartSink } from "./multipart";
import { UPLOAD_PURPOSES, fileView, type FileRow } from "./service";
import { uploadSlotsOf } from "./uploadSlots";

/** Multipart framing and small fields on top of the file itself. */
export const MULTIPART_SLACK = 64 * 1024;
const MAX_FIELD_BYTES = 4096;
/** After a rejection we read (and discard) at most this much more, so the client still gets our answer. */
const MAX_DRAIN_BYTES = 64 * 1024 * 1024;
export const MAX_FILENAME_CHARS = 1024;

interface UploadState {
  fields: Map<string, string>;
  filename: string | null;
  writer: BlobWriter | null;
  validator: ValidatorClient | null;
}

export async function uploadFile(ctx: AppContext, principal: Pick<Principal, "keyId" | "project">, request: Request) {
  const boundary = boundaryOf(request.headers.get("content-type"));
  const maxBytes = ctx.config.maxFileBytes;
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > maxBytes + MULTIPART_SLACK) throw tooLarge(maxBytes);
  if (!request.body) throw new ApiError("missing_field", "the request has no body", { param: "file" });
  const giveBackSlot = uploadSlotsOf(ctx).take(principal.keyId);
  const body = new IdleReader(request.body, ctx.config.uploadIdleTimeoutS * 1000);
  try {
    // With an Idempotency-Key (docs/CONTRACT.md §22) the parts are digested as they stream
    // in; a second request with the key reads its body only to compare it, then replays.
    return await withIdempotency(
      ctx,
      request,
      principal,
      "POST /files",
      { digestOnly: (digest) => digestUpload(body, boundary, maxBytes, digest) },
      (digest) => receive(ctx, principal.project, body, boundary, digest),
    );
  } catch (err) {
    // A body left unread (too long, idle, cut off, refused before reading): the answer
    // closes the connection; Bun would take the rest of a sized one for the next request.
    if (!(await drain(body)) && err instanceof ApiError) err.headers.connection = "close";
    throw err;
  } finally {
    body.close();
    giveBackSlot();
  }
}

async function receive(ctx: AppContext, project: string, body: IdleReader, boundary: string, digest: BodyDigest) {
  const id = newId("file-");
  const st: UploadState = { fields: new Map(), filename: null, writer: null, validator: null };
  try {
    await readMultipart(body, boundary, (part) => digestPart(digest, part, sinkFor(ctx, st, id, part)));
    digest.complete();
    return await finishUpload(ctx, project, id, st);
  } catch (caught) {
    let err = caught;
    // The validator saw a bad line mid-stream: report that line, not the stop.
    if (err instanceof EarlyReject) err = await batchLineCount(st.validator!, () => st.writer!.readBack()).then(() => new ApiError("invalid_file", "Invalid batch file"), (e) => e);
    st.writer?.abort();
    st.validator?.close();
    throw err;
  }
}

function sinkFor(ctx: AppContext, st: UploadState, id: string, part: PartInfo): PartSink {
  if (part.filename === null) return fieldSink(st, part.name);
  if (part.name !== "file") return discardSink;
  if (st.writer) throw new ApiError("invalid_value", "only one file may be uploaded per request", { param: "file" });
  if (!part.filename) throw new ApiError("invalid_value", "the file part needs a filename", { param: "file" });
  // Refused rather than cut short: a cut name loses its extension.
  if (part.filename.length > MAX_FILENAME_CHARS) throw new ApiError("invalid_value", `the filename is longer than ${MAX_FILENAME_CHARS} characters`, { param: "file" });
  st.filename = part.filename;
  return fileSink(ctx, st, id);
}

/** For a replay: the body read only into `digest`, as receive() feeds it, within the same size limit. */
async function digestUpload(body: IdleReader, boundary: string, maxBytes: number, digest: BodyDigest): Promise<void> {
  let bytes = 0;
  const counted: PartSink = {
    write(chunk) {
      if ((bytes += chunk.length) > maxBytes + MULTIPART_SLACK) throw tooLarge(maxBytes);
    },
    end() {},
  };
  await readMultipart(body, boundary, (part) => digestPart(digest, part, counted));
  digest.complete();
}

function fieldSink(st: UploadState, name: string): PartSink {
  const chunks: Uint8Array[] = [];
  let size = 0;
  return {
    write(chunk) {
      size += chunk.length;
      if (size > MAX_FIELD_BYTES) throw new ApiError("invalid_value", `form field '${name}' is too long`, { param: name });
      chunks.push(chunk.slice());
    },
    end() {
      // A field given twice (e.g. purpose=fine-tune before the file, purpose=batch after) is ambiguous.
      if (st.fields.has(name)) throw new ApiError("invalid_value", `form field '${name}' is given more than once`, { param: name });
      st.fields.set(name, Buffer.concat(chunks).toString("utf8"));
    },
  };
}

const discardSink: PartSink = { write() {}, end() {} };

function fileSink(ctx: AppContext, st: UploadState, id: string): PartSink {
  const writer = (st.writer = ctx.store.createWriter(id));
  // The purpose may come before or after the file. If it is known and not
  // "batch", skip validation; if unknown yet, validate speculatively and
  // decide at the end.
  const purpose = st.fields.get("purpose");
  const validate = purpose === undefined || purpose === "batch";
  let validator: ValidatorClient | null = null;
  return {
    async write(chunk) {
      if (writer.bytes + chunk.length > ctx.config.maxFileBytes) throw tooLarge(ctx.config.maxFileBytes);
      // On S3 a promise while the upload's queue of parts is full: reading waits for it.
      const sent = writer.write(chunk);
      if (sent) await sent;
      // The Workers start with the file's first byte, not its part's headers: a client that stalls there holds none.
      if (validate && !validator) validator = st.validator = batchValidator(ctx);
      if (validator) {
        // Known to be a batch file and already bad: stop reading now.
        if (validator.failed && st.fields.get("purpose") === "batch") throw new EarlyReject();
        await validator.write(chunk);
      }
    },
    // The file's last byte is in: its final flush overlaps the validation's end.
    end: () => writer.finish?.(),
  };
}

/** Internal signal: validation already failed; the real error comes from the validator's result. */
class EarlyReject extends Error {}

async function finishUpload(ctx: AppContext, project: string, id: string, st: UploadState) {
  const purpose = st.fields.get("purpose");
  if (purpose === undefined) throw new ApiError("missing_field", "purpose is required", { param: "purpose" });
  if (!(UPLOAD_PURPOSES as readonly string[]).includes(purpose))
    throw new ApiError("invalid_value", `purpose must be one of ${UPLOAD_PURPOSES.join(", ")}`, { param: "purpose" });
  if (!st.writer || st.filename === null) throw new ApiError("missing_field", "file is required", { param: "file" });
  if (st.writer.bytes === 0) throw new ApiError("invalid_file", "the file is empty", { param: "file" });
  const expiresAt = expiryOf(st.fields);

  let lineCount: number | null = null;
  if (purpose === "batch") lineCount = await batchLineCount(st.validator!, () => st.writer!.readBack());
  else st.validator?.close();

  await st.writer.commit();
  const row: FileRow = {
    seq: undefined as unknown as number,
    id,
    project,
    filename: st.filename,
    purpose,
    bytes: st.writer.bytes,
    status: "processed",
    statusDetails: null,
    createdAt: nowSeconds(),
    expiresAt: null,
    lineCount,
    parts: null,
  };
  if (expiresAt !== null) row.expiresAt = row.createdAt + expiresAt;
  const { seq: _seq, ...values } = row;
  try {
    await ctx.db.insert(ctx.db.t.files).values(values);
  } catch (e) {
    ctx.store.delete(id);
    throw e;
  }
  await ctx.db.syncCommits();
  return fileView(row);
}

/** The checks of a batch file's lines as its bytes stream by (also an Upload's parts at completion, src/uploads/). */
export const batchValidator = (ctx: AppContext) =>
  new ValidatorClient(ctx.config.maxBatchLines, {
    duplicateCheckBytes: ctx.config.duplicateCheckBytes,
    dataDir: ctx.config.dataDir,
    scanners: ctx.config.uploadValidationWorkers,
  });

/** `expires_after[anchor]=created_at` + `expires_after[seconds]` (3600..2592000), both or neither. */
function expiryOf(fields: Map<string, string>): number | null {
  const anchor = fields.get("expires_after[anchor]");
  const seconds = fields.get("expires_after[seconds]");
  if (anchor === undefined && seconds === undefined) return null;
  if (anchor !== "created_at") throw new ApiError("invalid_value", "expires_after[anchor] must be 'created_at'", { param: "expires_after.anchor" });
  if (seconds === undefined || !/^\d+$/.test(seconds) || Number(seconds) < 3600 || Number(seconds) > 2592000)
    throw new ApiError("invalid_value", "expires_after[seconds] must be an integer from 3600 to 2592000", { param: "expires_after.seconds" });
  return Number(seconds);
}

/** The number of requests in a valid batch file; throws the first bad line's 400 otherwise. `readBack`: the bytes again, to confirm suspected duplicates. */
export async function batchLineCount(validator: ValidatorClient, readBack: () => ReadableStream<Uint8Array>): Promise<number> {
  const result = await validator.finish();
  let error: LineError | null = result.error;
  // Fingerprint hits are only suspects: confirm them against the stored bytes.
  const suspects = result.suspects.filter((s) => !error || s.line <= error.line);
  const dup = suspects.length ? await firstConfirmedDuplicate(readBack(), suspects) : null;
  if (dup && (!error || dup.line <= error.line))
    error = { line: dup.line, code: "duplicate_custom_id", param: "custom_id", message: `line ${dup.line}: duplicate custom_id '${dup.customId.slice(0, 200)}'` };
  else if (error?.unconfirmed) error = { ...error, message: `line ${error.line}: could not confirm custom_id uniqueness` };
  if (error) throw new ApiError(error.code, `Invalid batch file: ${error.message}`, { param: error.param ?? "file" });
  return result.requests;
}

const tooLarge = (max: number) => new ApiError("file_too_large", `The file exceeds the maximum size of ${max} bytes`, { param: "file" });

/** Reads what is left of the body, up to MAX_DRAIN_BYTES (and no longer than the idle timeout allows a pause); whether it reached the end. */
export async function drain(body: IdleReader): Promise<boolean> {
  let n = 0;
  try {
    while (n < MAX_DRAIN_BYTES) {
      const { value, done } = await body.read();
      if (done) return !body.timedOut;
      n += value.byteLength;
    }
    body.close(true);
  } catch {
    // The client went away, or stopped sending.
  }
  return false;
}

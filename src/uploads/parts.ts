// POST /uploads/{id}/parts (docs/CONTRACT.md §22): one multipart `data` part of at most
// 64 MiB, streamed to the store as it arrives (never whole in memory: on
// disk a temp file renamed into the upload's parts at commit; on S3 an
// object of its own, sent in pieces) and recorded once its bytes are
// durable. Bounded like POST /files (docs/CONTRACT.md §16): an upload slot of the
// server's and the key's, and the idle timeout; a refused part leaves
// nothing stored.
import { count, eq } from "drizzle-orm";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { IdleReader } from "../http/idleReader";
import { newId, nowSeconds } from "../ids";
import { boundaryOf, readMultipart, type PartSink } from "../files/multipart";
import { drain, MULTIPART_SLACK } from "../files/upload";
import { uploadSlotsOf } from "../files/uploadSlots";
import { assertPending, getUpload, noLongerPending, whilePending } from "./service";

/** OpenAI's limit on a part, 64 MB; taken as 64 MiB, the part size of the Python SDK's upload_file_chunked. */
export const MAX_PART_BYTES = 64 * 1024 * 1024;
/** Parts one upload may have: a File's parts are rows, and a batch shard's Worker gets those its bytes span. */
export const MAX_PARTS = 10_000;

export async function addPart(ctx: AppContext, principal: Pick<Principal, "keyId" | "project">, uploadId: string, request: Request) {
  const upload = await getUpload(ctx, principal.project, uploadId);
  assertPending(upload, "add parts to");
  const boundary = boundaryOf(request.headers.get("content-type"));
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > MAX_PART_BYTES + MULTIPART_SLACK) throw tooLarge();
  if (!request.body) throw new ApiError("missing_field", "the request has no body", { param: "data" });
  const giveBackSlot = uploadSlotsOf(ctx).take(principal.keyId);
  const body = new IdleReader(request.body, ctx.config.uploadIdleTimeoutS * 1000);
  const partId = newId("part_");
  const { partKey, writer } = ctx.store.createPartWriter(upload.fileId, partId);
  let stored = false;
  try {
    let seen = false;
    await readMultipart(body, boundary, (part) => {
      if (part.name !== "data") return discardSink;
      if (seen) throw new ApiError("invalid_value", "only one data part may be sent per request", { param: "data" });
      seen = true;
      const sink: PartSink = {
        async write(chunk) {
          if (writer.bytes + chunk.length > MAX_PART_BYTES) throw tooLarge();
          const sent = writer.write(chunk);
          if (sent) await sent;
        },
        end: () => writer.finish?.(),
      };
      return sink;
    });
    if (!seen) throw new ApiError("missing_field", "data is required", { param: "data" });
    if (writer.bytes === 0) throw new ApiError("invalid_file", "the part is empty", { param: "data" });
    try {
      await writer.commit();
    } catch (e) {
      // Cancelled (or expired and swept) while it streamed: its parts' place is gone.
      throw (await noLongerPending(ctx, upload, "add parts to")) ?? e;
    }
    // From here a failure leaves the bytes where the upload's parts are: removed with them (cancel, expiry, the File's deletion).
    stored = true;
    const { uploads, uploadParts } = ctx.db.t;
    const now = nowSeconds();
    const outcome = await ctx.db.transaction(async (tx) => {
      // Touching the row locks it (Postgres): a completion or cancel that races waits, then sees this part or refuses it.
      const [u] = await tx.update(uploads).set({ status: "pending" }).where(whilePending(ctx, upload.id, now)).returning({ id: uploads.id });
      if (!u) return "not pending" as const;
      const [{ n } = { n: 0 }] = await tx.select({ n: count() }).from(uploadParts).where(eq(uploadParts.uploadId, upload.id));
      if (n >= MAX_PARTS) return "too many" as const;
      await tx.insert(uploadParts).values({ id: partId, uploadId: upload.id, key: partKey, bytes: writer.bytes, createdAt: now });
      return "added" as const;
    });
    if (outcome !== "added") {
      ctx.store.delete(partKey);
      if (outcome === "too many") throw new ApiError("invalid_value", `Upload ${upload.id} has ${MAX_PARTS} parts already`, { param: "data" });
      throw (await noLongerPending(ctx, upload, "add parts to")) ?? new Error(`upload ${upload.id}: a part found it not pending`);
    }
    await ctx.db.syncCommits();
    return { id: partId, object: "upload.part" as const, created_at: now, upload_id: upload.id };
  } catch (caught) {
    if (!stored) writer.abort();
    // A body left unread (too long, idle, cut off): the answer closes the connection (as POST /files).
    if (!(await drain(body)) && caught instanceof ApiError) caught.headers.connection = "close";
    throw caught;
  } finally {
    body.close();
    giveBackSlot();
  }
}

const discardSink: PartSink = { write() {}, end() {} };

const tooLarge = () => new ApiError("file_too_large", `A part may be at most ${MAX_PART_BYTES} bytes (64 MiB)`, { param: "data" });

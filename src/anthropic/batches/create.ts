// POST /v1/messages/batches (docs/CONTRACT.md §22): a message batch is made
// as an OpenAI batch is, so that it runs as one (docs/CONTRACT.md §5: the
// same engine, scheduling, durability, events, webhooks, cluster). The
// body is read as it streams and handed to a Worker (./linesClient.ts),
// where each request is checked and translated to a chat completion
// (./requestLines.ts); its line of the batch input file —
// `{custom_id, method, url, body}` — comes back and is written into the
// file store while the body is still arriving. Any bad request refuses
// the whole batch, naming it (`requests.N.params.…`, its custom_id), and the
// file written so far is dropped: nothing is made. Once all is read the
// file's row and the batch's row (api "anthropic", endpoint
// /v1/chat/completions, window 24h) are inserted in one transaction by the
// same createBatch the OpenAI route uses.
//
// Bounded as an upload is (docs/CONTRACT.md §16): one of the server's and the key's
// upload slots, the upload idle timeout, at most 256 MB read and only one
// request held at a time.
//
// With an Idempotency-Key (src/idempotency) the body is digested as it
// streams; a second request with the key reads its body only to compare
// it, then answers what the first did (an Anthropic-shaped error too).
import type { Principal } from "../../auth/verify";
import type { AppContext } from "../../context";
import type { BatchRow, FileRow } from "../../db/schema";
import { chatCompletions as chatKind } from "../../endpoints/chatCompletions";
import { serves } from "../../endpoints/kind";
import { anthropicErrorBody, ApiError } from "../../errors";
import { IdleReader } from "../../http/idleReader";
import { newId, nowSeconds } from "../../ids";
import { createBatch } from "../../batches/service";
import { drain } from "../../files/upload";
import { withIdempotency, type BodyDigest } from "../../idempotency";
import { uploadSlotsOf } from "../../files/uploadSlots";
import { RequestLinesJob } from "./linesClient";
import { MAX_BODY_BYTES } from "./requestLines";
import { tooLarge } from "./requestsReader";

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/**
 * Makes the batch and answers `answer(row)` (the caller's view of it, made
 * once the row is committed), or the first answer again for a retry with
 * the same Idempotency-Key (a Response).
 */
export async function createMessageBatch<T>(
  ctx: AppContext,
  principal: Pick<Principal, "keyId" | "project">,
  request: Request,
  answer: (row: BatchRow) => Promise<T>,
): Promise<T | Response> {
  const type = request.headers.get("content-type") ?? "";
  if (!JSON_TYPE.test(type))
    throw new ApiError("invalid_value", `The request body must be JSON with Content-Type: application/json (got ${type ? `'${type.slice(0, 100)}'` : "none"})`);
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > MAX_BODY_BYTES) throw tooLarge(MAX_BODY_BYTES);
  if (!request.body) throw new ApiError("missing_field", "requests: Field required", { param: "requests" });
  const giveBackSlot = uploadSlotsOf(ctx).take(principal.keyId);
  const body = new IdleReader(request.body, ctx.config.uploadIdleTimeoutS * 1000);
  try {
    return await withIdempotency(
      ctx,
      request,
      principal,
      "POST /v1/messages/batches",
      { digestOnly: (digest) => digestBody(body, digest) },
      async (digest) => answer(await receive(ctx, principal.project, body, digest)),
      { errorBody: (e) => anthropicErrorBody(e.status, e.message) },
    );
  } catch (err) {
    // A body left unread: the answer closes the connection (as an upload's, src/files/upload.ts).
    if (!(await drain(body)) && err instanceof ApiError) err.headers.connection = "close";
    throw err;
  } finally {
    body.close();
    giveBackSlot();
  }
}

/** For a replay: the body read only into `digest`, as receive() feeds it, within the same size limit. */
async function digestBody(body: IdleReader, digest: BodyDigest): Promise<void> {
  let total = 0;
  for (;;) {
    const { done, value } = await body.read();
    if (done) break;
    if (!value) continue;
    if ((total += value.length) > MAX_BODY_BYTES) throw tooLarge(MAX_BODY_BYTES);
    digest.update(value);
  }
  digest.complete();
}

async function receive(ctx: AppContext, project: string, body: IdleReader, digest: BodyDigest): Promise<BatchRow> {
  const fileId = newId("file-");
  const writer = ctx.store.createWriter(fileId);
  // The lines come encoded in the Worker's few buffers, each given back once written (./linesClient.ts).
  const write = async (bytes: Uint8Array) => {
    const sent = writer.write(bytes);
    if (sent) await sent;
  };
  const job = new RequestLinesJob(servingModels(ctx), write);
  let committed = false;
  try {
    let total = 0;
    for (;;) {
      const { done, value } = await body.read();
      if (done) break;
      if (!value || value.length === 0) continue;
      if ((total += value.length) > MAX_BODY_BYTES) throw tooLarge(MAX_BODY_BYTES);
      if (digest.active) digest.update(value);
      await job.send(value);
    }
    // The whole body is in (its answer may be kept for an Idempotency-Key's replay).
    digest.complete();
    const count = await job.end();
    writer.finish?.();
    await writer.commit();
    committed = true;
    const now = nowSeconds();
    return await ctx.db.transaction(async (tx) => {
      const [file] = await tx
        .insert(ctx.db.t.files)
        .values({ id: fileId, project, filename: "message_batch_requests.jsonl", purpose: "batch", bytes: writer.bytes, status: "processed", createdAt: now, lineCount: count })
        .returning();
      return createBatch(ctx, project, { input_file_id: fileId, endpoint: chatKind.endpoint, completion_window: "24h" }, { q: tx, file: file as FileRow, api: "anthropic" });
    });
  } catch (e) {
    writer.abort();
    // A committed blob whose rows did not make it: removed too (nothing is made).
    if (committed) ctx.store.delete(fileId);
    throw e;
  } finally {
    job.close();
  }
}

/** The models a message batch's requests may name: those that answer chat completions (an `api: "anthropic"` upstream speaks only /v1/messages). */
function servingModels(ctx: AppContext): string[] {
  return ctx.registry
    .list()
    .filter((m) => serves(chatKind, m.kind) && m.api !== "anthropic")
    .map((m) => m.id);
}

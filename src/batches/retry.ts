// POST /batches/{id}/retry (docs/CONTRACT.md §12): a new input file made of the original
// request lines of every line in the batch's error file, and a new batch on
// it with the same endpoint and window, metadata + retry_of.
//
// The lines are found in a Worker (retry.worker.ts): this thread only moves
// chunks between storage and the Worker, so a million-line input with
// 100,000 failures costs the event loop no more than an upload of the new
// file would, and memory holds the failed ids, never a whole file.
import { eq } from "drizzle-orm";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { newId, nowSeconds } from "../ids";
import type { RetryFromWorker, RetryToWorker } from "./retry.worker";
import { RETRY_WORKER } from "../workers";
import { FINAL_STATES, createBatch, getBatch, type BatchRow } from "./service";
import { fileStream } from "../files/content";

const conflict = (message: string) => new ApiError("invalid_state", message);

export async function retryBatch(ctx: AppContext, project: string, id: string): Promise<BatchRow> {
  const { files } = ctx.db.t;
  const b = await getBatch(ctx, project, id);
  if (!(FINAL_STATES as readonly string[]).includes(b.status)) throw conflict(`Batch ${b.id} is ${b.status}: only a batch in a final state can be retried`);
  if (b.failed === 0 || !b.errorFileId) throw conflict(`Batch ${b.id} has no failed lines to retry`);
  const [errRow] = await ctx.db.select().from(files).where(eq(files.id, b.errorFileId));
  if (!errRow) throw conflict(`The error file of batch ${b.id} no longer exists`);
  const [inRow] = await ctx.db.select().from(files).where(eq(files.id, b.inputFileId));
  if (!inRow) throw conflict(`The input file of batch ${b.id} no longer exists`);

  const fileId = newId("file-");
  const writer = ctx.store.createWriter(fileId);
  const worker = new Worker(RETRY_WORKER);
  const readers = { err: (await fileStream(ctx, errRow)).getReader(), in: (await fileStream(ctx, inRow)).getReader() };
  // The writer's last wait (S3: parts still being sent): the next read waits for it, so memory stays bounded.
  let sending: Promise<void> | void;
  try {
    const result = await new Promise<{ lines: number; missing: number }>((resolve, reject) => {
      worker.onerror = (e) => reject(new Error(`retry worker: ${e.message}`));
      worker.onmessage = (e: MessageEvent<RetryFromWorker>) => {
        const m = e.data;
        switch (m.type) {
          case "pull":
            Promise.resolve(sending)
              .then(() => readers[m.which].read())
              .then(({ value, done }) => {
                const data = done ? null : value;
                worker.postMessage({ type: "chunk", which: m.which, data } satisfies RetryToWorker);
              }, reject);
            return;
          case "out":
            sending = writer.write(m.data) ?? sending;
            return;
          case "done":
            return resolve(m);
          case "error":
            return reject(new Error(`retry worker: ${m.message}`));
        }
      };
      worker.postMessage({ type: "start" } satisfies RetryToWorker);
    });
    if (result.lines === 0) throw conflict(`None of the failed lines of batch ${b.id} were found in its input file`);
    if (result.missing > 0) ctx.log.warn("batch retry: failed lines missing from the input", { batch_id: b.id, missing: result.missing });
    await writer.commit();
    const now = nowSeconds();
    const metadata = { ...(b.metadata ?? {}), retry_of: b.id };
    const created = await ctx.db.transaction(async (tx) => {
      const [file] = await tx
        .insert(files)
        .values({ id: fileId, project, filename: `${b.id}_retry.jsonl`, purpose: "batch", bytes: writer.bytes, status: "processed", createdAt: now, lineCount: result.lines })
        .returning();
      return createBatch(
        ctx,
        project,
        {
          input_file_id: fileId,
          endpoint: b.endpoint,
          completion_window: b.completionWindow,
          metadata,
          output_expires_after: b.outputExpiresAfter ? { anchor: "created_at", seconds: b.outputExpiresAfter } : null,
        },
        { q: tx, file: file! },
      );
    });
    ctx.kickBatches();
    await ctx.db.syncCommits();
    return created;
  } catch (e) {
    writer.abort();
    // A committed blob whose rows failed: remove it too.
    const [kept] = await ctx.db.select({ id: files.id }).from(files).where(eq(files.id, fileId)).catch(() => [undefined]);
    if (!kept) ctx.store.delete(fileId);
    throw e;
  } finally {
    worker.terminate();
    for (const r of Object.values(readers)) r.cancel().catch(() => {});
  }
}

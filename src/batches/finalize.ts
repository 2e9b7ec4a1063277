// Ends a batch whose shards are all done: concatenates the part files into
// the output and error files, registers them as files, and sets the final
// state, all in a way that can simply be run again after a crash (the file
// ids are derived from the batch id, the blobs are replaced whole by rename,
// and the rows are written in one transaction).
import { rmSync } from "node:fs";
import { eq } from "drizzle-orm";
import type { AppContext } from "../context";
import { batches, batchShards, files } from "../db/schema";
import { derivedId, nowSeconds } from "../ids";
import { partPath, batchDir } from "./paths";
import type { BatchRow } from "./service";
import { recordBatchEvent } from "../webhooks/outbox";

async function concatParts(ctx: AppContext, fileId: string, paths: string[]): Promise<number> {
  const writer = ctx.store.createWriter(fileId);
  try {
    for (const p of paths) {
      const f = Bun.file(p);
      if (!(await f.exists())) continue;
      for await (const chunk of f.stream()) writer.write(chunk);
    }
    if (writer.bytes === 0) {
      writer.abort();
      return 0;
    }
    await writer.commit();
    return writer.bytes;
  } catch (e) {
    writer.abort();
    throw e;
  }
}

export async function finalizeBatch(ctx: AppContext, batch: BatchRow): Promise<void> {
  const shards = ctx.db.select().from(batchShards).where(eq(batchShards.batchId, batch.id)).orderBy(batchShards.idx).all();
  const outId = derivedId("file-", `${batch.id}:output`);
  const errId = derivedId("file-", `${batch.id}:error`);
  const outBytes = await concatParts(
    ctx,
    outId,
    shards.map((s) => partPath(ctx, batch.id, "out", s.idx)),
  );
  const errBytes = await concatParts(
    ctx,
    errId,
    shards.map((s) => partPath(ctx, batch.id, "err", s.idx)),
  );
  const sum = (k: "completed" | "failed" | "inputTokens" | "cachedTokens" | "outputTokens" | "reasoningTokens" | "costAmount") => shards.reduce((a, s) => a + s[k], 0);
  const now = nowSeconds();
  const expiresAt = batch.outputExpiresAfter ? now + batch.outputExpiresAfter : null;
  let final: "completed" | "cancelled" | "expired" = "completed";
  ctx.db.transaction((tx) => {
    // Read the stop reason again here: a cancel may have come in while the
    // parts were being joined, and the final state must agree with it.
    const stopReason = tx.select({ stopReason: batches.stopReason }).from(batches).where(eq(batches.id, batch.id)).get()?.stopReason ?? batch.stopReason;
    final = stopReason === "cancelled" ? "cancelled" : stopReason === "expired" ? "expired" : "completed";
    for (const [id, bytes, kind] of [
      [outId, outBytes, "output"],
      [errId, errBytes, "error"],
    ] as const) {
      if (bytes === 0) continue;
      tx.insert(files)
        .values({ id, project: batch.project, filename: `${batch.id}_${kind}.jsonl`, purpose: "batch_output", bytes, status: "processed", createdAt: now, expiresAt })
        .onConflictDoUpdate({ target: files.id, set: { bytes } })
        .run();
    }
    tx.update(batches)
      .set({
        status: final,
        completedAt: final === "completed" ? now : null,
        cancelledAt: final === "cancelled" ? now : null,
        expiredAt: final === "expired" ? now : null,
        outputFileId: outBytes ? outId : null,
        errorFileId: errBytes ? errId : null,
        completed: sum("completed"),
        failed: sum("failed"),
        inputTokens: sum("inputTokens"),
        cachedTokens: sum("cachedTokens"),
        outputTokens: sum("outputTokens"),
        reasoningTokens: sum("reasoningTokens"),
        costAmount: sum("costAmount"),
        leaseOwner: null,
        leaseExpiresAt: null,
      })
      .where(eq(batches.id, batch.id))
      .run();
    tx.delete(batchShards).where(eq(batchShards.batchId, batch.id)).run();
    // The webhook events of this final state, in the same transaction (an outbox).
    recordBatchEvent(tx, batch, final);
  });
  rmSync(batchDir(ctx, batch.id), { recursive: true, force: true });
  ctx.log.info("batch finished", { batch_id: batch.id, status: final, completed: sum("completed"), failed: sum("failed") });
}

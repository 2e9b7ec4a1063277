// Ends a batch whose shards are all done, in O(shards): the output and error
// files are composed of the shards' part files (file_parts rows, in shard
// order), so no result byte is copied or read. Each non-empty part file moves
// into the store (BlobStore.adoptPart: a rename on disk), the directories
// that gained entries are fsynced, the batch's working directory (by then
// only empty part files) goes to the trash, and one transaction writes the
// file records, their parts and the final state. (Concatenating the part
// files into one file on the main thread and rmSync'ing them, measured:
// 1–4 s of frozen server at 1M lines, 21 s at 10M.)
//
// Any step can be cut short by a crash and the whole thing simply runs again:
// the file ids are derived from the batch id, a part already moved is found
// where it went, the batch directory's removal is idempotent, and the rows
// are written in one transaction that also deletes the shards, so a batch is
// either still finalizing (and will be finalized again) or done.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { eq, inArray } from "drizzle-orm";
import type { AppContext } from "../context";
import { threadSettings } from "../threadSettings";
import { derivedId, nowSeconds } from "../ids";
import type { BlobPart } from "../storage/blobStore";
import { trashIn } from "../storage/trash";
import { batchDir, partPath } from "./paths";
import { FINAL_STATES, type BatchRow } from "./service";
import { recordBatchEvent } from "../webhooks/outbox";

/**
 * TEST HOOK, never set in production: OFFPEAK_TEST_FINALIZE_PAUSE_MS=N
 * (src/threadSettings.ts) makes finalize log each step ("batch finalize step", at info)
 * and then wait N ms, so a test can SIGKILL the server at a known step and
 * check that a restart finishes the batch correctly
 * (test/batches-compose-crash.test.ts).
 */
const testPauseMs = () => threadSettings().testFinalizePauseMs;

async function step(ctx: AppContext, batchId: string, name: string, fields: Record<string, unknown> = {}): Promise<void> {
  const ms = testPauseMs();
  if (ms <= 0) return;
  ctx.log.info("batch finalize step", { batch_id: batchId, step: name, ...fields });
  await new Promise((r) => setTimeout(r, ms));
}

/** Part moves in flight at once (each is a stat and a rename on the thread pool); one at a time under the test hook, so steps are in a known order. */
const adoptConcurrency = () => (testPauseMs() > 0 ? 1 : 8);

/** `shards`: those whose part of this kind has lines (a shard's totals count its part files' lines exactly), with the run that ended each. */
async function adoptParts(ctx: AppContext, batchId: string, fileId: string, kind: "out" | "err", shards: { idx: number; claims: number }[]): Promise<{ idx: number; part: BlobPart }[]> {
  const idxs = shards.map((s) => s.idx);
  const claimOf = new Map(shards.map((s) => [s.idx, s.claims]));
  const adopted: ({ idx: number; part: BlobPart } | null)[] = new Array(idxs.length).fill(null);
  let next = 0;
  const lane = async () => {
    while (next < idxs.length) {
      const i = next++;
      const idx = idxs[i]!;
      const part = await ctx.store.adoptPart(fileId, idx, partPath(ctx, batchId, kind, idx), claimOf.get(idx)!);
      if (part) {
        adopted[i] = { idx, part };
        await step(ctx, batchId, "part adopted", { kind, idx });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(adoptConcurrency(), idxs.length) }, lane));
  return adopted.filter((a) => a !== null);
}

/** The ids of a batch's output and error files: derived from its id, so that a finalize run again (or a Worker uploading a part) names the same files. */
export const resultFileIds = (batchId: string) => ({ out: derivedId("file-", `${batchId}:output`), err: derivedId("file-", `${batchId}:error`) });

export async function finalizeBatch(ctx: AppContext, batch: BatchRow): Promise<void> {
  const { batches, batchShards, fileParts, files } = ctx.db.t;
  const shards = await ctx.db.select().from(batchShards).where(eq(batchShards.batchId, batch.id)).orderBy(batchShards.idx);
  const { out: outId, err: errId } = resultFileIds(batch.id);
  const outParts = await adoptParts(ctx, batch.id, outId, "out", shards.filter((s) => s.completed > 0));
  const errParts = await adoptParts(ctx, batch.id, errId, "err", shards.filter((s) => s.failed > 0));
  // The moved parts' names are on disk before any record points at them.
  await Promise.all([ctx.store.syncParts(outId), ctx.store.syncParts(errId)]);
  await step(ctx, batch.id, "parts durable");
  // What is left of the working directory (empty part files) goes now,
  // before the commit: after it, nothing would run this again.
  trashIn(ctx.config.dataDir).discard(batchDir(ctx, batch.id));
  await step(ctx, batch.id, "leftovers discarded");

  const sum = (k: "completed" | "failed" | "inputTokens" | "cachedTokens" | "outputTokens" | "reasoningTokens" | "costAmount") => shards.reduce((a, s) => a + s[k], 0);
  const bytesOf = (parts: { part: BlobPart }[]) => parts.reduce((a, p) => a + p.part.bytes, 0);
  const outBytes = bytesOf(outParts);
  const errBytes = bytesOf(errParts);
  const now = nowSeconds();
  const expiresAt = batch.outputExpiresAfter ? now + batch.outputExpiresAfter : null;
  let final: "completed" | "cancelled" | "expired" = "completed";
  await ctx.db.transaction(async (tx) => {
    // Read the stop reason again here: a cancel may have come in while the
    // parts were being moved, and the final state must agree with it.
    const [now_] = await tx.select({ stopReason: batches.stopReason }).from(batches).where(eq(batches.id, batch.id));
    const stopReason = now_?.stopReason ?? batch.stopReason;
    final = stopReason === "cancelled" ? "cancelled" : stopReason === "expired" ? "expired" : "completed";
    for (const [id, parts, bytes, kind] of [
      [outId, outParts, outBytes, "output"],
      [errId, errParts, errBytes, "error"],
    ] as const) {
      if (bytes === 0) continue;
      await tx
        .insert(files)
        .values({ id, project: batch.project, filename: `${batch.id}_${kind}.jsonl`, purpose: "batch_output", bytes, parts: parts.length, status: "processed", createdAt: now, expiresAt })
        .onConflictDoUpdate({ target: files.id, set: { bytes, parts: parts.length } });
      await tx.delete(fileParts).where(eq(fileParts.fileId, id));
      for (let i = 0; i < parts.length; i += 500)
        await tx.insert(fileParts).values(parts.slice(i, i + 500).map((p) => ({ fileId: id, idx: p.idx, key: p.part.key, bytes: p.part.bytes })));
    }
    await tx
      .update(batches)
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
        // A finished batch has neither (docs/CONTRACT.md §18).
        estimatedCompletionAt: null,
        statusDetailsCode: null,
        statusDetailsMessage: null,
        statusDetailsSince: null,
      })
      .where(eq(batches.id, batch.id));
    await tx.delete(batchShards).where(eq(batchShards.batchId, batch.id));
    // The webhook events of this final state, in the same transaction (an outbox).
    await recordBatchEvent(tx, ctx.db.t, batch, final);
  });
  // Logged once committed (what GET /batches/{id} shows from now on), before
  // the flush: a stop right after a client saw the final state still has the line.
  ctx.log.info("batch finished", { batch_id: batch.id, status: final, completed: sum("completed"), failed: sum("failed"), output_parts: outParts.length, error_parts: errParts.length });
  // The final state on disk soon (off the main thread); a crash before it only finalizes again.
  await ctx.db.syncCommits();
}

/**
 * Moves to the trash the working directories of batches that no longer run
 * (a crash between finalize's commit and the removal of what was left, a
 * batch that failed validation, an older version's leftovers). Cheap: one
 * directory listing and one query; run at start and with the periodic sweep.
 */
export async function sweepBatchLeftovers(ctx: AppContext): Promise<number> {
  const root = join(ctx.config.dataDir, "batches");
  let names: string[];
  try {
    names = await readdir(root);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw e;
  }
  if (names.length === 0) return 0;
  const { batches } = ctx.db.t;
  const running = new Set(
    (await ctx.db.select({ id: batches.id, status: batches.status }).from(batches).where(inArray(batches.id, names)))
      .filter((b) => !(FINAL_STATES as readonly string[]).includes(b.status))
      .map((b) => b.id),
  );
  let n = 0;
  for (const name of names) if (!running.has(name) && trashIn(ctx.config.dataDir).discard(join(root, name))) n++;
  return n;
}

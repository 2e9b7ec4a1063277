// A run task for a shard this node has claimed: what its Worker reads (the
// input's byte range), where it writes (its part files here, and with the
// files in a bucket, the part objects it uploads before "done"), and what it
// runs under (a stop's code, the deadline, attempts, in-flight lines).
import { mkdirSync } from "node:fs";
import type { AppContext } from "../../context";
import type { BatchRow, ShardRow } from "../../db/schema";
import { resultFileIds } from "../finalize";
import { batchDir, partPath } from "../paths";
import type { RunTask } from "../types";
import { stopCodeOf } from "./stops";
import { fileLocator } from "../../files/content";
import { narrowLocator } from "../../storage/locator";

/** Lines of one shard in flight at once on an unlimited upstream (on a limited model: its limit now, worker/runShard.ts boundFor). */
export const SHARD_CONCURRENCY = 64;

export async function runTaskOf(ctx: AppContext, batch: BatchRow, shard: ShardRow): Promise<RunTask> {
  const ids = resultFileIds(batch.id);
  const claim = shard.claims;
  const out = ctx.store.partTarget(ids.out, shard.idx, claim);
  const err = ctx.store.partTarget(ids.err, shard.idx, claim);
  mkdirSync(batchDir(ctx, batch.id), { recursive: true });
  return {
    type: "run",
    batchId: batch.id,
    idx: shard.idx,
    // A composed input (a File made of an Upload's parts): only the parts this shard reads.
    ...narrowLocator(await fileLocator(ctx, batch.inputFileId), shard.startByte, shard.endByte),
    endpoint: batch.endpoint,
    outPath: partPath(ctx, batch.id, "out", shard.idx),
    errPath: partPath(ctx, batch.id, "err", shard.idx),
    partTargets: out && err ? { out, err } : null,
    claim,
    stopCode: stopCodeOf(batch.stopReason),
    deadline: batch.expiresAt * 1000,
    maxAttempts: ctx.config.batches.maxAttempts,
    retryBaseMs: ctx.config.batches.retryBaseMs,
    concurrency: SHARD_CONCURRENCY,
    // A message batch's answers are written as Anthropic's messages: its results are then read without translating each line.
    answerShape: batch.api === "anthropic" ? "message" : "endpoint",
  };
}

import { join } from "node:path";
import type { AppContext } from "../context";

/** Working files of running batches live under <dataDir>/batches/<batch_id>/. */
export const batchDir = (ctx: AppContext, batchId: string) => join(ctx.config.dataDir, "batches", batchId);
export const partPath = (ctx: AppContext, batchId: string, kind: "out" | "err", idx: number) => join(batchDir(ctx, batchId), `${kind}-${idx}.jsonl`);

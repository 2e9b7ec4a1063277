// The hand-off to finalize (../finalize.ts): a running batch whose shards
// are all done goes to `finalizing` under this node's batch-level lease, and
// finalize composes its output and error files from the shards' parts and
// writes the final state. Finalize is made to run again from the rows: cut
// short (a crash, the database away), a later tick, here or on another
// node, starts it again.
import { eq } from "drizzle-orm";
import type { AppContext } from "../../context";
import { databaseUnavailable } from "../../db/unavailable";
import { nowSeconds } from "../../ids";
import { finalizeBatch } from "../finalize";
import type { BatchRow } from "../service";
import type { TickQueries } from "../tickQueries";
import type { ProgressRecords } from "./records";

export class Finalizing {
  /** Batches being finalized by this node now. */
  private readonly running = new Set<string>();

  constructor(
    private readonly ctx: AppContext,
    private readonly q: TickQueries,
    private readonly claimBatch: (b: BatchRow, now: number) => Promise<boolean>,
    private readonly records: ProgressRecords,
    /** Called when a batch's finalization ends, whatever its outcome. */
    private readonly ended: (batchId: string) => void,
  ) {}

  /** At each tick: batches ready to finalize whose lease this node takes. */
  async start(now: number): Promise<void> {
    const { batches } = this.ctx.db.t;
    const ready = await this.q.readyToFinalize.execute();
    for (const b of ready) {
      if (this.running.has(b.id) || !(await this.claimBatch(b, now))) continue;
      this.running.add(b.id);
      let row = b;
      if (!b.stopReason && b.status !== "finalizing") {
        [row] = (await this.ctx.db.update(batches).set({ status: "finalizing", finalizingAt: nowSeconds(), estimatedCompletionAt: null, statusDetailsCode: null, statusDetailsMessage: null, statusDetailsSince: null }).where(eq(batches.id, b.id)).returning()) as [BatchRow];
        this.ctx.log.info("batch finalizing", { batch_id: b.id, status: "finalizing" });
      }
      // Cut short, it runs again from the rows at a later tick (it is made to).
      finalizeBatch(this.ctx, row)
        .catch((e) => {
          const down = databaseUnavailable(e);
          if (down) this.records.noteUnavailable("batch finalization", down, { batch_id: b.id });
          else this.ctx.log.error("batch finalization failed", { batch_id: b.id, error: String(e?.stack ?? e) });
        })
        .finally(() => {
          this.running.delete(b.id);
          this.ended(b.id);
        });
    }
  }
}

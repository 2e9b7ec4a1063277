// Expiry and cancellation of running batches. A batch past its deadline gets
// stopReason "expired" (one statement a tick); a cancelled one got
// "cancelled" from the API (batches/service.ts). Either way its shards stop
// executing and write every line not yet done as an error with the stop's
// code: shards claimed after the stop get the code with their task, Workers
// running one when it came are told once ("stop"). Finalize then ends the
// batch in `expired` or `cancelled`.
import { and, inArray, sql } from "drizzle-orm";
import type { AppContext } from "../../context";
import { nowSeconds } from "../../ids";
import type { WorkerPool } from "../pool";
import type { TickQueries } from "../tickQueries";

export type StopCode = "batch_cancelled" | "batch_expired";

export const stopCodeOf = (reason: string | null): StopCode | null => (reason === "cancelled" ? "batch_cancelled" : reason === "expired" ? "batch_expired" : null);

export class Stops {
  /** Batches whose Workers were told to stop (until the batch is finalized). */
  private readonly sent = new Set<string>();

  constructor(
    private readonly ctx: AppContext,
    private readonly q: TickQueries,
  ) {}

  /** Batches past their deadline are stopped ("expired"). */
  async markExpired(): Promise<void> {
    await this.q.markExpired.execute({ before: nowSeconds() + 1 });
  }

  /** Tells Workers running shards of a stopped batch to drain the rest as errors; `running`: the batches with shards running here. */
  async send(running: Set<string>, pool: WorkerPool | null): Promise<void> {
    if (running.size === 0) return;
    const { batches } = this.ctx.db.t;
    const stopped = await this.ctx.db
      .select({ id: batches.id, stopReason: batches.stopReason })
      .from(batches)
      .where(and(inArray(batches.id, [...running]), sql`${batches.stopReason} IS NOT NULL`));
    for (const b of stopped) {
      if (this.sent.has(b.id)) continue;
      this.sent.add(b.id);
      pool?.broadcast({ type: "stop", batchId: b.id, code: stopCodeOf(b.stopReason)! });
    }
  }

  /** Whether the batch's Workers were told to stop (its shards are draining). */
  stopping(batchId: string): boolean {
    return this.sent.has(batchId);
  }

  /** The batch was finalized. */
  forget(batchId: string): void {
    this.sent.delete(batchId);
  }
}

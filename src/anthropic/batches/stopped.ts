// Which of a batch's error lines are lines its cancel or expiry stopped
// before they ran (docs/CONTRACT.md §22: Anthropic counts and shows them as
// `canceled` / `expired`, not `errored`). The engine writes such a line as
// `{"id":…,"custom_id":…,"response":null,"error":{"code":"batch_cancelled",…}}`
// (src/batches/worker/resultLines.ts stoppedLine); a custom_id of a message
// batch holds only [A-Za-z0-9_-], so the marker cannot occur before it.
//
// The counts of an ended batch never change: read from its error file once
// per process and kept (a bounded map), so polling a cancelled batch reads
// its error file once, not at every retrieve.
import { eq } from "drizzle-orm";
import type { AppContext } from "../../context";
import type { BatchRow } from "../../db/schema";
import { fileStream } from "../../files/content";
import { readLines } from "../../jsonl/lineReader";

const CANCELLED = '"response":null,"error":{"code":"batch_cancelled"';
const EXPIRED = '"response":null,"error":{"code":"batch_expired"';

/** How an error line ended: stopped by a cancel, by expiry, or an error of its own. */
export function stopOf(line: string): "canceled" | "expired" | null {
  if (line.includes(CANCELLED)) return "canceled";
  if (line.includes(EXPIRED)) return "expired";
  return null;
}

export interface StoppedCounts {
  canceled: number;
  expired: number;
}

const KEPT = 10_000;
const known = new Map<string, Promise<StoppedCounts>>();

/** The stopped lines of an ended batch's error file. */
export function stoppedCounts(ctx: AppContext, b: BatchRow): Promise<StoppedCounts> {
  const key = `${b.id}/${b.errorFileId}`;
  let p = known.get(key);
  if (!p) {
    p = count(ctx, b.errorFileId);
    known.set(key, p);
    p.catch(() => known.delete(key));
    if (known.size > KEPT) known.delete(known.keys().next().value!);
  }
  return p;
}

/** Forgets a deleted batch. */
export const forgetStopped = (batchId: string): void => {
  for (const k of known.keys()) if (k.startsWith(`${batchId}/`)) known.delete(k);
};

async function count(ctx: AppContext, errorFileId: string | null): Promise<StoppedCounts> {
  const out: StoppedCounts = { canceled: 0, expired: 0 };
  if (!errorFileId) return out;
  const [row] = await ctx.db.select().from(ctx.db.t.files).where(eq(ctx.db.t.files.id, errorFileId));
  if (!row) return out;
  for await (const lines of readLines(await fileStream(ctx, row)))
    for (const { text } of lines) {
      const s = stopOf(text);
      if (s) out[s]++;
    }
  return out;
}

// A batch row as Anthropic's `message_batch` (docs/CONTRACT.md §22): the
// OpenAI statuses folded into processing_status, the counters into
// request_counts, Unix seconds into RFC 3339 strings.
//
// request_counts: succeeded = the lines answered; processing = those not
// done yet. A stopped batch's unfinished lines end as error lines with
// code batch_cancelled / batch_expired (src/batches/worker/resultLines.ts),
// counted by the engine among its failed lines: once the batch has ended
// they are told apart by reading its error file once (./stopped.ts), and
// shown as canceled / expired; the rest of the failed lines are errored.
// While a batch is being cancelled its lines stopped so far count as
// errored until it ends.
import type { AppContext } from "../../context";
import type { BatchRow } from "../../db/schema";
import { messageBatchId } from "./ids";
import { stoppedCounts } from "./stopped";

export type ProcessingStatus = "in_progress" | "canceling" | "ended";

const ENDED = new Set(["completed", "failed", "expired", "cancelled"]);

export function processingStatusOf(status: string): ProcessingStatus {
  if (ENDED.has(status)) return "ended";
  return status === "cancelling" ? "canceling" : "in_progress";
}

export const isEnded = (b: BatchRow): boolean => ENDED.has(b.status);

const rfc3339 = (s: number | null | undefined): string | null => (s == null ? null : new Date(s * 1000).toISOString());

export interface MessageBatch {
  id: string;
  type: "message_batch";
  processing_status: ProcessingStatus;
  request_counts: { processing: number; succeeded: number; errored: number; canceled: number; expired: number };
  ended_at: string | null;
  created_at: string;
  expires_at: string;
  cancel_initiated_at: string | null;
  archived_at: null;
  results_url: string | null;
}

/** `root`: the server's root URL as the client reached it ("http://host:port"), for results_url. */
export async function messageBatchView(ctx: AppContext, b: BatchRow, root: string): Promise<MessageBatch> {
  const id = messageBatchId(b.id);
  const ended = isEnded(b);
  let errored = b.failed;
  let canceled = 0;
  let expired = 0;
  if (b.status === "failed") {
    // Refused by the engine's own checks before any line ran (a model gone since creation): every request errored.
    errored = b.total;
  } else if (ended && b.failed > 0 && (b.status === "cancelled" || b.status === "expired")) {
    const stopped = await stoppedCounts(ctx, b);
    canceled = stopped.canceled;
    expired = stopped.expired;
    errored = Math.max(0, b.failed - canceled - expired);
  }
  const succeeded = b.status === "failed" ? 0 : b.completed;
  return {
    id,
    type: "message_batch",
    processing_status: processingStatusOf(b.status),
    request_counts: { processing: ended ? 0 : Math.max(0, b.total - b.completed - b.failed), succeeded, errored, canceled, expired },
    ended_at: rfc3339(b.completedAt ?? b.cancelledAt ?? b.expiredAt ?? b.failedAt),
    created_at: rfc3339(b.createdAt)!,
    expires_at: rfc3339(b.expiresAt)!,
    cancel_initiated_at: rfc3339(b.cancellingAt),
    archived_at: null,
    results_url: ended ? `${root}/v1/messages/batches/${id}/results` : null,
  };
}

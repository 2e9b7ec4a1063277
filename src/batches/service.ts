// Batch records: create, read, list, cancel. Execution lives in runner.ts.
import { checkMetadata } from "../metadata";
import { and, desc, eq, inArray, isNull, lt } from "drizzle-orm";
import type { AppContext } from "../context";
import type { BatchRow, FileRow } from "../db/schema";
import type { Queryable } from "../db/client";
import { ApiError, notFound } from "../errors";
import { isId, newId, nowSeconds } from "../ids";
import { addFileDeleteGuard, getFile } from "../files/service";
import { ENDPOINT_KINDS, kindOfUrl } from "../endpoints";
import { serves } from "../endpoints/kind";
import type { StatusDetailCode, StatusDetails } from "./statusDetails";
import { BATCH_DISCOUNT } from "./worker/usage";
import { messageBatchId } from "../anthropic/batches/ids";

export type { BatchRow };
export const FINAL_STATES = ["completed", "failed", "expired", "cancelled"] as const;
export const ACTIVE_STATES = ["validating", "in_progress", "finalizing", "cancelling"] as const;

/** Clears estimated_completion_at and status_details (a batch stopping or ending). */
export const NO_PROGRESS = { estimatedCompletionAt: null, statusDetailsCode: null, statusDetailsMessage: null, statusDetailsSince: null } as const;

/** status_details as sent (docs/CONTRACT.md §18); null once a batch is final, whatever its row holds. */
function statusDetailsOf(b: BatchRow): StatusDetails | null {
  if (!b.statusDetailsCode || (FINAL_STATES as readonly string[]).includes(b.status)) return null;
  return { code: b.statusDetailsCode as StatusDetailCode, message: b.statusDetailsMessage ?? "", since: b.statusDetailsSince ?? b.createdAt };
}

export function batchView(b: BatchRow) {
  const final = (FINAL_STATES as readonly string[]).includes(b.status);
  return {
    id: b.id,
    object: "batch" as const,
    endpoint: b.endpoint,
    model: b.model ?? null,
    errors: b.errors ? { object: "list" as const, data: b.errors } : null,
    input_file_id: b.inputFileId,
    completion_window: b.completionWindow,
    status: b.status,
    output_file_id: b.outputFileId ?? null,
    error_file_id: b.errorFileId ?? null,
    created_at: b.createdAt,
    in_progress_at: b.inProgressAt ?? null,
    expires_at: b.expiresAt,
    finalizing_at: b.finalizingAt ?? null,
    completed_at: b.completedAt ?? null,
    failed_at: b.failedAt ?? null,
    expired_at: b.expiredAt ?? null,
    cancelling_at: b.cancellingAt ?? null,
    cancelled_at: b.cancelledAt ?? null,
    request_counts: { total: b.total, completed: b.completed, failed: b.failed },
    usage: {
      input_tokens: b.inputTokens,
      input_tokens_details: { cached_tokens: b.cachedTokens },
      output_tokens: b.outputTokens,
      output_tokens_details: { reasoning_tokens: b.reasoningTokens },
      total_tokens: b.inputTokens + b.outputTokens,
    },
    cost: { currency: "USD", amount: Math.round(b.costAmount * 1e6) / 1e6, discount: BATCH_DISCOUNT },
    metadata: b.metadata ?? null,
    estimated_completion_at: final ? null : (b.estimatedCompletionAt ?? null),
    status_details: statusDetailsOf(b),
    // A message batch (docs/CONTRACT.md §22), as the console and the CLI see it: which API made it and its id there.
    ...(b.api ? { api: b.api, message_batch_id: messageBatchId(b.id) } : {}),
  };
}

export interface CreateBatchInput {
  input_file_id: string;
  endpoint: string;
  completion_window: string;
  metadata?: unknown;
  output_expires_after?: { anchor?: string; seconds?: number } | null;
}


/** The longest completion_window (docs/CONTRACT.md §18): 7d = 168h. */
export const MAX_WINDOW_HOURS = 168;

/** Hours of a completion_window: `Nh` or `Nd`, from 1h to 7d (docs/CONTRACT.md §18); anything else is a 400. */
export function windowHours(window: string): number {
  const m = /^([1-9]\d{0,2})([hd])$/.exec(window); // no leading zeros: "001h" is not how anyone writes 1h
  const hours = m ? Number(m[1]) * (m[2] === "d" ? 24 : 1) : NaN;
  if (!(hours >= 1 && hours <= MAX_WINDOW_HOURS))
    throw new ApiError("invalid_value", "completion_window must be '24h', or any 'Nh' or 'Nd' from 1h to 7d (e.g. '1h', '48h', '7d')", { param: "completion_window" });
  return hours;
}

/**
 * The canonical form ("/v1/…") of a batch `endpoint` some model here serves;
 * anything else (an unknown path, `/v1/images/generations`, a kind only
 * upstream models serve when none is configured) is refused: 400
 * unsupported_endpoint naming it (docs/CONTRACT.md §22).
 */
export function batchEndpoint(ctx: AppContext, endpoint: string): string {
  const kind = kindOfUrl(endpoint);
  if (kind && ctx.registry.list().some((m) => serves(kind, m.kind))) return kind.endpoint;
  const shown = endpoint.length > 200 ? `${endpoint.slice(0, 200)}…` : endpoint;
  throw new ApiError("unsupported_endpoint", `The endpoint '${shown}' is not supported for batches: no model here serves it (supported: ${servedEndpoints(ctx).join(", ")})`, {
    param: "endpoint",
  });
}

/** The batch endpoints some model here serves. */
export const servedEndpoints = (ctx: AppContext): string[] =>
  ENDPOINT_KINDS.filter((k) => ctx.registry.list().some((m) => serves(k, m.kind))).map((k) => k.endpoint);

/** `within`: a transaction to create it in, and the input file's row when that transaction just made it; `api`: "anthropic" for a message batch (src/anthropic/batches). */
export async function createBatch(ctx: AppContext, project: string, input: CreateBatchInput, within?: { q: Queryable; file: FileRow; api?: "anthropic" }): Promise<BatchRow> {
  const endpoint = batchEndpoint(ctx, input.endpoint);
  const hours = windowHours(input.completion_window);
  const metadata = checkMetadata(input.metadata);
  let outputExpiresAfter: number | null = null;
  if (input.output_expires_after) {
    const s = input.output_expires_after.seconds;
    if (input.output_expires_after.anchor !== "created_at") throw new ApiError("invalid_value", "output_expires_after.anchor must be 'created_at'", { param: "output_expires_after.anchor" });
    if (!Number.isInteger(s) || s! < 3600 || s! > 2592000) throw new ApiError("invalid_value", "output_expires_after.seconds must be from 3600 to 2592000", { param: "output_expires_after.seconds" });
    outputExpiresAfter = s!;
  }
  const file = within?.file ?? (await getFile(ctx, project, input.input_file_id, "input_file_id"));
  if (file.purpose !== "batch") throw new ApiError("invalid_value", `file ${file.id} has purpose '${file.purpose}', not 'batch'`, { param: "input_file_id" });
  const now = nowSeconds();
  const [row] = await (within?.q ?? ctx.db)
    .insert(ctx.db.t.batches)
    .values({
      id: newId("batch_"),
      project,
      endpoint,
      inputFileId: file.id,
      completionWindow: input.completion_window,
      status: "validating",
      createdAt: now,
      expiresAt: now + hours * ctx.config.batches.hourSeconds,
      total: file.lineCount ?? 0,
      metadata,
      outputExpiresAfter,
      api: within?.api ?? null,
    })
    .returning();
  return row!;
}

export async function getBatch(ctx: AppContext, project: string, id: string): Promise<BatchRow> {
  if (!isId("batch_", id)) throw notFound("batch", id);
  const { batches } = ctx.db.t;
  const [row] = await ctx.db.select().from(batches).where(and(eq(batches.id, id), eq(batches.project, project)));
  if (!row) throw notFound("batch", id);
  return row;
}

/** Message batches (docs/CONTRACT.md §22) only with `withMessageBatches` (the console and the CLI list both): an OpenAI client sees its own kind. */
export async function listBatches(ctx: AppContext, project: string, limit: number, after?: string, withMessageBatches = false) {
  const { batches } = ctx.db.t;
  const conds = [eq(batches.project, project)];
  if (!withMessageBatches) conds.push(isNull(batches.api));
  if (after) {
    const [cursor] = isId("batch_", after) ? await ctx.db.select({ seq: batches.seq }).from(batches).where(and(eq(batches.id, after), eq(batches.project, project))) : [];
    if (!cursor) throw new ApiError("invalid_value", `after: no batch with id '${after.slice(0, 80)}'`, { param: "after" });
    conds.push(lt(batches.seq, cursor.seq));
  }
  const rows = await ctx.db.select().from(batches).where(and(...conds)).orderBy(desc(batches.seq)).limit(limit + 1);
  const hasMore = rows.length > limit;
  const page = (hasMore ? rows.slice(0, limit) : rows).map(batchView);
  return { object: "list" as const, data: page, first_id: page[0]?.id ?? null, last_id: page[page.length - 1]?.id ?? null, has_more: hasMore };
}

export async function cancelBatch(ctx: AppContext, project: string, id: string): Promise<BatchRow> {
  const { batches } = ctx.db.t;
  const row = await getBatch(ctx, project, id);
  if (row.status === "cancelling") return row;
  if (row.status !== "validating" && row.status !== "in_progress")
    throw new ApiError("invalid_state", `Cannot cancel a batch in status '${row.status}'`);
  // A batch past its deadline is already being expired and ends `expired`;
  // it is not in a final state yet, so no 409 (docs/CONTRACT.md §5): the record as it is.
  if (row.stopReason === "expired") return row;
  const [updated] = await ctx.db
    .update(batches)
    .set({ status: "cancelling", cancellingAt: nowSeconds(), stopReason: "cancelled", ...NO_PROGRESS })
    .where(and(eq(batches.id, row.id), inArray(batches.status, ["validating", "in_progress"]), isNull(batches.stopReason)))
    .returning();
  // Lost a race with the runner finishing it: report the state it reached.
  if (!updated) return cancelBatch(ctx, project, id);
  return updated;
}

addFileDeleteGuard(async (ctx, fileId) => {
  const { batches } = ctx.db.t;
  const [running] = await ctx.db
    .select({ id: batches.id })
    .from(batches)
    .where(and(eq(batches.inputFileId, fileId), inArray(batches.status, [...ACTIVE_STATES])))
    .limit(1);
  return running ? `File ${fileId} is the input of batch ${running.id}, which is still running` : null;
});

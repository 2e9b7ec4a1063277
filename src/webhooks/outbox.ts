// The webhook outbox (docs/CONTRACT.md §12): a batch's final state and its events are
// written in one transaction, so an event exists exactly when the state does,
// whatever crashes in between; the sender delivers them afterwards.
import { eq } from "drizzle-orm";
import type { Queryable } from "../db/client";
import type { Tables } from "../db/schema";
import { newId } from "../ids";

export const BATCH_EVENT_TYPES = ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"] as const;
export type BatchEventType = (typeof BATCH_EVENT_TYPES)[number];

/**
 * Records one event per endpoint of the batch's project that wants `type`.
 * Call inside the transaction that sets the batch's final state.
 */
export async function recordBatchEvent(tx: Queryable, t: Tables, batch: { id: string; project: string }, final: "completed" | "failed" | "cancelled" | "expired"): Promise<void> {
  const type: BatchEventType = `batch.${final}`;
  const { webhookEndpoints, webhookEvents } = t;
  const endpoints = await tx.select({ id: webhookEndpoints.id, events: webhookEndpoints.events }).from(webhookEndpoints).where(eq(webhookEndpoints.project, batch.project));
  const now = Date.now();
  // created_at in seconds, as every other created_at (and the event body's); next_attempt_at in ms.
  const createdAt = Math.floor(now / 1000);
  for (const e of endpoints) {
    if (!e.events.includes(type)) continue;
    const id = newId("evt_");
    // OpenAI's exact event body.
    const payload = JSON.stringify({ id, object: "event", type, created_at: createdAt, data: { id: batch.id } });
    await tx.insert(webhookEvents).values({ id, endpointId: e.id, type, payload, status: "pending", attempts: 0, nextAttemptAt: now, createdAt });
  }
}

// The webhook outbox (SPEC §12): a batch's final state and its events are
// written in one transaction, so an event exists exactly when the state does,
// whatever crashes in between; the sender delivers them afterwards.
import { eq } from "drizzle-orm";
import type { Db } from "../db/client";
import { webhookEndpoints, webhookEvents } from "../db/schema";
import { newId, nowSeconds } from "../ids";

export const BATCH_EVENT_TYPES = ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"] as const;
export type BatchEventType = (typeof BATCH_EVENT_TYPES)[number];

/** A transaction or the database: whatever `db.transaction` hands its callback. */
type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0] | Db;

/**
 * Records one event per endpoint of the batch's project that wants `type`.
 * Call inside the transaction that sets the batch's final state.
 */
export function recordBatchEvent(tx: Tx, batch: { id: string; project: string }, final: "completed" | "failed" | "cancelled" | "expired"): void {
  const type: BatchEventType = `batch.${final}`;
  const endpoints = tx.select({ id: webhookEndpoints.id, events: webhookEndpoints.events }).from(webhookEndpoints).where(eq(webhookEndpoints.project, batch.project)).all();
  const now = Date.now();
  for (const e of endpoints) {
    if (!e.events.includes(type)) continue;
    const id = newId("evt_");
    // OpenAI's exact event body.
    const payload = JSON.stringify({ id, object: "event", type, created_at: nowSeconds(), data: { id: batch.id } });
    tx.insert(webhookEvents).values({ id, endpointId: e.id, type, payload, status: "pending", attempts: 0, nextAttemptAt: now, createdAt: now }).run();
  }
}

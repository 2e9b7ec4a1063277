// Delivers the webhook outbox (SPEC §12): at least once, in the background,
// with bounded concurrency. A slow or dead receiver delays nothing else: every
// delivery is an async request with its own 10 s timeout, at most
// PER_ENDPOINT of them per endpoint (no head-of-line blocking across
// endpoints) and MAX_IN_FLIGHT in all. A delivery that fails is tried again
// with a growing delay, the same `webhook-id` every time, for up to 72 h.
//
// A row being delivered has its next_attempt_at pushed LEASE_MS ahead when
// it is taken: if the process dies mid-delivery, the event is sent again
// after that (at least once), by this process after a restart or by any other.
import { and, asc, eq, lte } from "drizzle-orm";
import type { AppContext } from "../context";
import { webhookAttempts, webhookEndpoints, webhookEvents } from "../db/schema";
import { nowSeconds } from "../ids";
import { signatureHeaders } from "./sign";

const TICK_MS = 1000;
const TIMEOUT_MS = 10_000;
const LEASE_MS = 60_000;
const MAX_IN_FLIGHT = 128;
const PER_ENDPOINT = 64;
const GIVE_UP_AFTER_MS = 72 * 3600_000;
/** Delay before attempt n+1 after n failed ones: the first retry within 30 s. */
const BACKOFF_MS = [5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 14_400_000, 28_800_000];
const backoff = (attempts: number) => {
  const base = BACKOFF_MS[Math.min(attempts, BACKOFF_MS.length) - 1]!;
  return Math.round(base * (0.8 + 0.4 * Math.random()));
};

type EventRow = typeof webhookEvents.$inferSelect;

export class WebhookSender {
  private timer: ReturnType<typeof setInterval> | null = null;
  private inFlight = 0;
  private readonly perEndpoint = new Map<string, number>();
  private readonly taken = new Set<string>();
  private ticking = false;
  private stopped = false;

  /** 1 but in tests (config webhookRetryBaseMs), to see a retry without waiting 5 s. */
  private readonly backoffScale: number;

  constructor(private readonly ctx: AppContext) {
    this.backoffScale = ctx.config.webhookRetryBaseMs / BACKOFF_MS[0]!;
  }

  start(): void {
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref?.();
    this.tick();
  }

  /** Deliveries running now. */
  get running(): number {
    return this.inFlight;
  }

  private tick(): void {
    if (this.stopped || this.ticking || this.inFlight >= MAX_IN_FLIGHT) return;
    this.ticking = true;
    try {
      const now = Date.now();
      const due = this.ctx.db
        .select()
        .from(webhookEvents)
        .where(and(eq(webhookEvents.status, "pending"), lte(webhookEvents.nextAttemptAt, now)))
        .orderBy(asc(webhookEvents.nextAttemptAt))
        .limit(MAX_IN_FLIGHT * 4)
        .all();
      for (const row of due) {
        if (this.inFlight >= MAX_IN_FLIGHT) break;
        if (this.taken.has(row.id) || (this.perEndpoint.get(row.endpointId) ?? 0) >= PER_ENDPOINT) continue;
        const leased = this.ctx.db
          .update(webhookEvents)
          .set({ nextAttemptAt: now + LEASE_MS })
          .where(and(eq(webhookEvents.id, row.id), eq(webhookEvents.status, "pending"), lte(webhookEvents.nextAttemptAt, now)))
          .returning({ id: webhookEvents.id })
          .all();
        if (leased.length === 0) continue;
        this.take(row);
        void this.deliver(row).finally(() => this.release(row));
      }
    } catch (e) {
      this.ctx.log.error("webhook sender tick failed", { error: String(e) });
    } finally {
      this.ticking = false;
    }
  }

  private take(row: EventRow): void {
    this.inFlight++;
    this.taken.add(row.id);
    this.perEndpoint.set(row.endpointId, (this.perEndpoint.get(row.endpointId) ?? 0) + 1);
  }

  private release(row: EventRow): void {
    this.inFlight--;
    this.taken.delete(row.id);
    const n = (this.perEndpoint.get(row.endpointId) ?? 1) - 1;
    if (n <= 0) this.perEndpoint.delete(row.endpointId);
    else this.perEndpoint.set(row.endpointId, n);
    // Room again: more may be due now (a backlog drains without waiting for the timer).
    if (!this.stopped) queueMicrotask(() => this.tick());
  }

  private async deliver(row: EventRow): Promise<void> {
    const endpoint = this.ctx.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, row.endpointId)).get();
    if (!endpoint) {
      this.ctx.db.delete(webhookEvents).where(eq(webhookEvents.id, row.id)).run();
      return;
    }
    let statusCode: number | null = null;
    let error: string | null = null;
    try {
      const res = await fetch(endpoint.url, {
        method: "POST",
        headers: { "content-type": "application/json", "user-agent": "offpeak-webhooks", ...signatureHeaders(endpoint.secret, row.id, row.payload) },
        body: row.payload,
        redirect: "manual",
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      statusCode = res.status;
      // The answer's body means nothing to us; don't hold the connection for it.
      await res.body?.cancel().catch(() => {});
      if (res.status < 200 || res.status > 299) error = `HTTP ${res.status}`;
    } catch (e) {
      error = (e as Error).name === "TimeoutError" ? `no answer within ${TIMEOUT_MS / 1000} s` : String((e as Error).message ?? e).slice(0, 300);
    }
    if (this.stopped) return; // the database may be closing: the lease brings it back
    const attempt = row.attempts + 1;
    const now = Date.now();
    const giveUp = error !== null && now - row.createdAt >= GIVE_UP_AFTER_MS;
    this.ctx.db.transaction((tx) => {
      tx.insert(webhookAttempts).values({ eventId: row.id, endpointId: row.endpointId, type: row.type, attempt, statusCode, error, createdAt: nowSeconds() }).run();
      tx.update(webhookEvents)
        .set(error === null ? { status: "delivered", attempts: attempt } : giveUp ? { status: "failed", attempts: attempt } : { attempts: attempt, nextAttemptAt: now + Math.max(50, backoff(attempt) * this.backoffScale) })
        .where(eq(webhookEvents.id, row.id))
        .run();
    });
    if (error !== null)
      // The URL may hold a token in its query: log the endpoint id, never the URL or the secret.
      this.ctx.log.warn("webhook delivery failed", { endpoint_id: row.endpointId, event_id: row.id, attempt, status_code: statusCode, error, gave_up: giveUp });
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
  }
}

// Delivers the webhook outbox (docs/CONTRACT.md §12): at least once, in the background,
// with bounded concurrency. A slow or dead receiver delays nothing else: every
// delivery is an async request with its own 10 s timeout, at most
// PER_ENDPOINT of them per endpoint (no head-of-line blocking across
// endpoints) and MAX_IN_FLIGHT in all. A delivery that fails is tried again
// with a growing delay, the same `webhook-id` every time, for up to 72 h.
//
// A row being delivered has its next_attempt_at pushed LEASE_MS ahead when
// it is taken: if the process dies mid-delivery, the event is sent again
// after that (at least once), by this process after a restart or by any other.
//
// Every time the sender uses (due, leases, backoff, the 72 h give-up, an
// attempt's created_at) comes from its clock: Date.now, or one a test
// injects (startServer's webhookClock) to reach the give-up without waiting.
// An event's created_at is in Unix seconds, as every other created_at.
//
// Due rows are read per endpoint, at most as many as that endpoint has room
// for: one endpoint's backlog never hides another's events, and a query reads
// only rows it can take. Every TICK_MS each endpoint with room is read; when
// deliveries end, only their endpoints are, once for all the deliveries that
// ended within REFILL_MS. (Reading the oldest 512 due rows of all endpoints
// after every delivery instead, measured: a 10,000-event backlog to one slow
// receiver cost the HTTP thread 10-25% of its time in bursts of tens of ms,
// and other endpoints waited until that backlog was under 512.)
import { and, asc, eq, lte, sql } from "drizzle-orm";
import type { AppContext } from "../context";
import type { WebhookEventRow } from "../db/schema";
import { egressPolicy, type EgressPolicy } from "./egress";
import { postWebhook } from "./post";
import { signatureHeaders } from "./sign";

const TICK_MS = 1000;
/** Deliveries of one endpoint that end within this many ms share one read of its due rows. */
const REFILL_MS = 5;
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

type EventRow = WebhookEventRow;
interface Outcome {
  eventId: string;
  endpointId: string;
  type: string;
  attempt: number;
  statusCode: number | null;
  error: string | null;
  createdAt: number;
  status: "pending" | "delivered" | "failed";
  /** The next attempt's time, or null to leave it. */
  next: number | null;
}

export class WebhookSender {
  private timer: ReturnType<typeof setInterval> | null = null;
  private inFlight = 0;
  private readonly perEndpoint = new Map<string, number>();
  private readonly taken = new Set<string>();
  private ticking = false;
  private stopped = false;
  /** Endpoints that got room since their last read, and the timer that reads them. */
  private readonly refills = new Set<string>();
  private refillAll = false;
  private refillTimer: ReturnType<typeof setTimeout> | null = null;
  /** Which endpoint a tick reads first (rotates, so none always gets the shared room first). */
  private turn = 0;
  /** Attempts made but not yet written: those that end in one turn of the event loop are written together, at its end. */
  private outcomes: Outcome[] = [];
  private outcomesTimer: ReturnType<typeof setImmediate> | null = null;
  /** The write of outcomes under way (writes run one after another, so awaiting this awaits every earlier one). */
  private writing: Promise<void> = Promise.resolve();
  /** Events attempted whose outcome is not yet committed: they stay taken until it is. */
  private readonly unwritten = new Set<string>();

  /** 1 but in tests (config webhookRetryBaseMs), to see a retry without waiting 5 s. */
  private readonly backoffScale: number;

  private readonly q;
  /** Where deliveries may go (webhooks.allowed_hosts). */
  private readonly policy: EgressPolicy;

  /** ms since the epoch: Date.now, or a test's clock. */
  private readonly now: () => number;

  constructor(
    private readonly ctx: AppContext,
    opts: { clock?: () => number } = {},
  ) {
    this.now = opts.clock ?? Date.now;
    this.policy = egressPolicy(ctx.config.webhookAllowedHosts);
    this.backoffScale = ctx.config.webhookRetryBaseMs / BACKOFF_MS[0]!;
    // Prepared once: built per call, Drizzle's query building costs more than the queries here.
    const { webhookAttempts, webhookEndpoints, webhookEvents: e } = ctx.db.t;
    this.q = {
      endpoints: ctx.db.select({ id: webhookEndpoints.id }).from(webhookEndpoints).prepare("webhooks_endpoints"),
      /** An endpoint's due rows, oldest first (params: endpoint, now, limit). */
      due: ctx.db
        .select()
        .from(e)
        .where(and(eq(e.endpointId, sql.placeholder("endpoint")), eq(e.status, "pending"), lte(e.nextAttemptAt, sql.placeholder("now"))))
        .orderBy(asc(e.nextAttemptAt))
        .limit(sql.placeholder("limit"))
        .prepare("webhooks_due"),
      /** Takes a due row (params: id, now, until); returns it only if it was still due. */
      lease: ctx.db
        .update(e)
        .set({ nextAttemptAt: sql`${sql.placeholder("until")}` })
        .where(and(eq(e.id, sql.placeholder("id")), eq(e.status, "pending"), lte(e.nextAttemptAt, sql.placeholder("now"))))
        .returning({ id: e.id })
        .prepare("webhooks_lease"),
      endpoint: ctx.db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, sql.placeholder("id"))).prepare("webhooks_endpoint"),
      attempt: ctx.db
        .insert(webhookAttempts)
        .values({
          eventId: sql.placeholder("eventId"),
          endpointId: sql.placeholder("endpointId"),
          type: sql.placeholder("type"),
          attempt: sql.placeholder("attempt"),
          statusCode: sql.placeholder("statusCode"),
          error: sql.placeholder("error"),
          createdAt: sql.placeholder("createdAt"),
        })
        .prepare("webhooks_attempt"),
      /** An attempt's outcome (params: id, status, attempts, next: the next attempt's time, or null to leave it). */
      settle: ctx.db
        .update(e)
        .set({ status: sql`${sql.placeholder("status")}`, attempts: sql`${sql.placeholder("attempts")}`, nextAttemptAt: sql`coalesce(${sql.placeholder("next")}, ${e.nextAttemptAt})` })
        .where(eq(e.id, sql.placeholder("id")))
        .prepare("webhooks_settle"),
    };
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

  /** Every endpoint with room. */
  private tick(): void {
    if (this.stopped) return;
    void this.readEndpoints();
  }

  private async readEndpoints(): Promise<void> {
    await this.writeOutcomes();
    let ids: string[];
    try {
      ids = (await this.q.endpoints.execute()).map((r) => r.id);
    } catch (e) {
      this.ctx.log.error("webhook sender tick failed", { error: String(e) });
      return;
    }
    if (ids.length > 1) {
      const k = this.turn++ % ids.length;
      ids = [...ids.slice(k), ...ids.slice(0, k)];
    }
    await this.fill(ids);
  }

  /** Takes due rows of these endpoints, as many as each has room for. */
  private async fill(endpointIds: Iterable<string>): Promise<void> {
    if (this.stopped || this.ticking) return;
    this.ticking = true;
    try {
      const now = this.now();
      const leased: EventRow[] = [];
      // SQLite: one commit for every lease (a commit each cost ≈4× as much).
      // Each lease is a conditional update on its own: of two nodes, one takes a row.
      await this.ctx.db.grouped(async () => {
        let room = MAX_IN_FLIGHT - this.inFlight;
        for (const endpointId of endpointIds) {
          const mine = Math.min(PER_ENDPOINT - (this.perEndpoint.get(endpointId) ?? 0), room);
          if (mine <= 0) continue;
          for (const row of await this.q.due.execute({ endpoint: endpointId, now, limit: mine })) {
            if (this.taken.has(row.id)) continue;
            if ((await this.q.lease.execute({ id: row.id, now, until: now + LEASE_MS })).length === 0) continue;
            leased.push(row);
            room--;
          }
          if (room <= 0) break;
        }
      });
      for (const row of leased) {
        this.take(row);
        // A failure here (the database away while the endpoint is read) leaves the row leased: it is sent again after the lease.
        void this.deliver(row)
          .catch((e) => this.ctx.log.error("webhook delivery failed before it was sent or recorded", { event_id: row.id, error: String(e) }))
          .finally(() => this.release(row));
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
    // At the global limit, every endpoint may have been waiting for this room.
    if (this.inFlight >= MAX_IN_FLIGHT) this.refillAll = true;
    this.inFlight--;
    // Until its outcome is committed the row still reads as due once its lease is over (a slow
    // database, a clock that jumps): it stays taken, and the write frees it.
    if (!this.unwritten.has(row.id)) this.taken.delete(row.id);
    const n = (this.perEndpoint.get(row.endpointId) ?? 1) - 1;
    if (n <= 0) this.perEndpoint.delete(row.endpointId);
    else this.perEndpoint.set(row.endpointId, n);
    if (this.stopped) return;
    // Room again: more may be due now (a backlog drains without waiting for the timer).
    this.refills.add(row.endpointId);
    this.refillTimer ??= setTimeout(() => {
      this.refillTimer = null;
      const all = this.refillAll;
      this.refillAll = false;
      const ids = [...this.refills];
      this.refills.clear();
      void this.writeOutcomes().then(() => (all ? this.readEndpoints() : this.fill(ids)));
    }, REFILL_MS);
  }

  private async deliver(row: EventRow): Promise<void> {
    const [endpoint] = await this.q.endpoint.execute({ id: row.endpointId });
    if (!endpoint) {
      const e = this.ctx.db.t.webhookEvents;
      await this.ctx.db.delete(e).where(eq(e.id, row.id));
      return;
    }
    const headers = { "content-type": "application/json", "user-agent": "offpeak-webhooks", ...signatureHeaders(endpoint.secret, row.id, row.payload) };
    const { statusCode, error, detail } = await postWebhook(endpoint.url, headers, row.payload, this.policy, { timeoutMs: TIMEOUT_MS });
    if (this.stopped) return; // the database may be closing: the lease brings it back
    const attempt = row.attempts + 1;
    const now = this.now();
    const giveUp = error !== null && now - row.createdAt * 1000 >= GIVE_UP_AFTER_MS;
    // Written with the others that end in the same turn (and always before due rows are read
    // again); until then it stays taken here, and leased for other nodes.
    this.outcomesTimer ??= setImmediate(() => {
      this.outcomesTimer = null;
      void this.writeOutcomes();
    });
    this.unwritten.add(row.id);
    this.outcomes.push({
      eventId: row.id,
      endpointId: row.endpointId,
      type: row.type,
      attempt,
      statusCode,
      error,
      createdAt: Math.floor(now / 1000),
      status: error === null ? "delivered" : giveUp ? "failed" : "pending",
      next: error === null || giveUp ? null : now + Math.max(50, backoff(attempt) * this.backoffScale),
    });
    if (error !== null)
      // The URL may hold a token in its query: log the endpoint id, never the URL or the secret.
      this.ctx.log.warn("webhook delivery failed", { endpoint_id: row.endpointId, event_id: row.id, attempt, status_code: statusCode, error, detail, gave_up: giveUp });
  }

  /**
   * Records the attempts made since the last call, in one transaction (one commit each cost ≈3× as much).
   * Chained after any write under way: a read of due rows that awaits this sees every outcome
   * made before it (returning early while another write was still open let a tick send an
   * event again — seen on Postgres).
   */
  private writeOutcomes(): Promise<void> {
    this.writing = this.writing.then(() => this.writeNow());
    return this.writing;
  }

  private async writeNow(): Promise<void> {
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    try {
      await this.ctx.db.grouped(async () => {
        for (const o of batch) {
          await this.q.attempt.execute({ eventId: o.eventId, endpointId: o.endpointId, type: o.type, attempt: o.attempt, statusCode: o.statusCode, error: o.error, createdAt: o.createdAt });
          await this.q.settle.execute({ id: o.eventId, status: o.status, attempts: o.attempt, next: o.next });
        }
      });
    } catch (e) {
      // Not recorded: the leases expire and these events are sent again (at least once).
      this.ctx.log.error("webhook sender: recording attempts failed", { error: String(e), attempts: batch.length });
    } finally {
      // Committed (or, on failure, left to the lease): these rows read as they should now.
      for (const o of batch) {
        this.unwritten.delete(o.eventId);
        this.taken.delete(o.eventId);
      }
    }
  }

  async stop(): Promise<void> {
    // The attempts already made are recorded (the database is still open here).
    if (this.outcomesTimer) clearImmediate(this.outcomesTimer);
    this.stopped = true;
    while (this.ticking) await new Promise((r) => setTimeout(r, 5));
    await this.writeOutcomes();
    if (this.timer) clearInterval(this.timer);
    if (this.refillTimer) clearTimeout(this.refillTimer);
  }
}

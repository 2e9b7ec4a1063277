// The batch runner: one per process, on the main thread. It never holds the
// truth itself: batches and shards are claimed through rows with a lease
// (owner + expiry), results live in part files, and every decision is made
// again from the database on each tick. Per-line work happens in Workers.
import { mkdirSync } from "node:fs";
import { and, eq, inArray, isNull, sql } from "drizzle-orm";
import type { AppContext } from "../context";
import type { Queryable } from "../db/client";
import { claimShards } from "../db/claims";
import { databaseUnavailable, unavailableLogger, type DatabaseUnavailable } from "../db/unavailable";
import type { Tables } from "../db/schema";
import { nowSeconds } from "../ids";
import { newNodeId, processGone } from "../nodes/identity";
import type { ModelRegistry } from "../inference/registry";
import { finalizeBatch, resultFileIds } from "./finalize";
import { kindOfUrl } from "../endpoints";
import { serves } from "../endpoints/kind";
import { recordBatchEvent } from "../webhooks/outbox";
import { applyWorkerMetrics } from "../metrics";
import { batchDir, partPath } from "./paths";
import { WorkerPool } from "./pool";
import type { BatchRow } from "./service";
import { shardBoundaries } from "./shards";
import { CELLS, type Release } from "../inference/admission/scheduler";
import { prepareTickQueries, type TickQueries } from "./tickQueries";
import { BatchProgress, signalsOf } from "./statusDetails";
import { bucketOf, peakNow, type BatchKey } from "./order";
import { windowHours } from "./service";
import { zeroTotals, type ToWorker, type FromWorker, type PricedModel, type ShardTotals, type ValidateResult, type WorkerTask } from "./types";

const TICK_MS = 200;
const COUNTS_MS = 500;
const MAX_REPORTED_ERRORS = 100;

type StopCode = "batch_cancelled" | "batch_expired";
const stopCodeOf = (reason: string | null): StopCode | null => (reason === "cancelled" ? "batch_cancelled" : reason === "expired" ? "batch_expired" : null);

interface Validation {
  batch: BatchRow;
  results: (ValidateResult | null)[];
  left: number;
  tasks: WorkerTask[];
}

/** A failing shard task is tried again after 1 s, 2 s, 4 s … at most 5 min (a hot loop before). */
const retryDelayMs = (failures: number) => Math.min(1000 * 2 ** (failures - 1), 300_000);
/** Validation of a shard that fails this often fails the batch (a run task keeps backing off: its work is not lost). */
const MAX_VALIDATE_FAILURES = 3;
/** A progress record is written again after 0.1 s, 0.2 s … at most 2 s while the database is unavailable (it lands soon after it returns), at most 30 s after any other error; jittered. */
const recordDelayMs = (attempt: number, down: boolean) => Math.min(100 * 2 ** (attempt - 1), down ? 2000 : 30_000) * (0.5 + Math.random() / 2);

export class BatchRunner {
  /** This node's id (src/nodes/identity.ts). */
  readonly owner: string;
  private readonly q: TickQueries;
  /** estimated_completion_at and status_details of the batches running here (SPEC §18); `progress.peakHours` is the peak-hours hook. */
  readonly progress: BatchProgress;
  private pool: WorkerPool | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private ticking = false;
  private kicked = false;
  private stopping = false;
  /** Shards running in this process, with their latest totals. */
  private readonly live = new Map<string, { batchId: string; idx: number; totals: ShardTotals }>();
  private readonly validations = new Map<string, Validation>();
  private readonly finalizing = new Set<string>();
  private readonly stopsSent = new Set<string>();
  private lastCounts = 0;
  /** Batches whose counters changed since the last write (a shard finished). */
  private readonly dirty = new Set<string>();
  /** Progress records still being written (record()): stop() waits for them. */
  private readonly recording = new Set<Promise<void>>();
  /** Set by stop() when it stops waiting for them: what is left lapses with the leases. */
  private abandoned = false;
  /** When ticks began to find the database unavailable (0: they do not). */
  private downSince = 0;
  /** When the database came back after ticks found it unavailable (Infinity: not yet; it is away). */
  private backAt = -Infinity;
  private readonly noteUnavailable = unavailableLogger((msg, fields) => this.ctx.log.warn(msg, fields));

  constructor(
    private readonly ctx: AppContext,
    private readonly registry: ModelRegistry,
  ) {
    this.owner = newNodeId(ctx.config.nodeName);
    this.q = prepareTickQueries(ctx.db, this.owner);
    this.progress = new BatchProgress(ctx.db, signalsOf(registry, ctx.scheduler));
    this.progress.peakHours = (b) => {
      const k = this.keys.get(b.id);
      if (!k?.key.capped || !b.model) return null;
      const s = ctx.scheduler.stats(b.model);
      if (s.cappedQueued === 0) return null;
      return `peak hours: batches with a window of 24h or more get ${Math.round(ctx.scheduler.peakShare * 100)}% of model ${b.model}'s capacity (${s.batchCap} slots)`;
    };
  }

  /** The batch order's key of each batch whose shards ran here (batches/order.ts), with what the peak cap needs. */
  private readonly keys = new Map<string, { key: BatchKey; hours: number; expiresAt: number; seenAt: number }>();
  /** Capped batches found to miss their deadline at the capped rate: uncapped for good (SPEC §18). */
  private readonly overridden = new Set<string>();

  private keyOf(batch: BatchRow): BatchKey {
    let k = this.keys.get(batch.id);
    if (!k) {
      k = { key: { bucket: bucketOf(batch.expiresAt, this.ctx.config.batches.hourSeconds), project: batch.project, batch: batch.id, capped: false }, hours: windowHours(batch.completionWindow), expiresAt: batch.expiresAt, seenAt: Date.now() };
      this.keys.set(batch.id, k);
      this.capOne(k, this.ctx.scheduler.peakShare);
    }
    k.seenAt = Date.now();
    return k.key;
  }

  /** Whether a batch is capped now; true if that changed it to uncapped. */
  private capOne(k: { key: BatchKey; hours: number; expiresAt: number }, share: number): boolean {
    const was = k.key.capped;
    let capped = share < 1 && k.hours >= 24 && !this.overridden.has(k.key.batch);
    if (capped) {
      // Its estimated finish at the capped rate (the rate it has now, while capped) passes its deadline: uncapped.
      const eta = this.progress.etaOf(k.key.batch);
      if (eta !== null && eta > k.expiresAt) {
        this.overridden.add(k.key.batch);
        this.ctx.log.info("batch uncapped in peak hours: it would miss its deadline", { batch_id: k.key.batch, estimated_completion_at: eta, expires_at: k.expiresAt });
        capped = false;
      }
    }
    k.key.capped = capped;
    return was && !capped;
  }

  /** Off-peak hours (SPEC §18): the share for the scheduler, and which batches it caps. */
  private applyPeak(now: number): void {
    const { share } = peakNow(this.ctx.config.batches, now);
    this.ctx.scheduler.setPeakShare(share);
    let freed = false;
    for (const [id, k] of this.keys) {
      if (now - k.seenAt > 600_000 && ![...this.live.values()].some((l) => l.batchId === id)) {
        this.keys.delete(id);
        continue;
      }
      freed = this.capOne(k, share) || freed;
    }
    if (freed) this.ctx.scheduler.pumpAll();
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), TICK_MS);
    this.kick();
  }

  /** Runs a tick soon (coalesced). Called after API changes so work starts at once. */
  kick(): void {
    if (this.stopping) return;
    if (this.ticking) {
      this.kicked = true;
      return;
    }
    this.ticking = true;
    this.tick()
      .then(() => this.databaseBack())
      .catch((e) => {
        const down = databaseUnavailable(e);
        if (down) return this.databaseDown(down);
        this.ctx.log.error("batch runner tick failed", { error: String(e?.stack ?? e) });
      })
      .finally(() => {
        this.ticking = false;
        if (this.kicked) {
          this.kicked = false;
          queueMicrotask(() => this.kick());
        }
      });
  }

  /**
   * The database does not answer (a restart, a failover, a cut: SPEC §17):
   * ticks fail until it does, Workers go on with the shards they hold and
   * their answers wait in their part files, and what they report is
   * recorded once it is back (record()). Said once, not at every tick.
   */
  private databaseDown(e: DatabaseUnavailable): void {
    // Leases seen lapsed are not taken over until one lease period after it is back (ownerIsDead).
    this.backAt = Infinity;
    if (this.downSince) return;
    this.downSince = Date.now();
    this.ctx.log.warn("database unavailable: batch work waits for it", { error: e.message, live_shards: this.live.size });
  }

  private databaseBack(): void {
    if (!this.downSince) return;
    this.ctx.log.info("database available again", { down_ms: Date.now() - this.downSince });
    this.downSince = 0;
    this.backAt = Date.now();
  }

  private models(): PricedModel[] {
    return this.registry.list().map((m) => ({
      id: m.id,
      kind: m.kind,
      baseUrl: m.baseUrl,
      apiKey: m.apiKey,
      upstreamModel: m.upstreamModel,
      timeoutMs: m.timeoutMs,
      latencyMs: m.latencyMs,
      tokensPerSecond: m.tokensPerSecond,
      upstreamIdx: m.upstreamIdx,
      inputPerMillion: m.pricing.inputPerMillion,
      outputPerMillion: m.pricing.outputPerMillion,
      limited: m.maxConcurrency !== null,
      sharedBase: this.ctx.scheduler.sharedBase(m),
    }));
  }

  private getPool(): WorkerPool {
    this.pool ??= new WorkerPool(
      Math.max(1, this.ctx.config.batches.workers),
      () => this.models(),
      this.ctx.scheduler.sharedCells,
      this.registry.health.mem,
      (m, worker) => this.onWorkerMessage(m, worker),
      (task, error, worker, held) => this.onWorkerCrash(task, error, worker, held),
    );
    return this.pool;
  }

  private async tick(): Promise<void> {
    const now = Date.now();
    this.applyPeak(now);
    await this.markExpired();
    this.registry.health.sweep();
    await this.renewLeases(now);
    await this.releaseDeadLeases(now);
    await this.sendStops();
    await this.startValidations(now);
    await this.dispatchShards(now);
    await this.startFinalizations(now);
    if (now - this.lastCounts >= COUNTS_MS) {
      this.lastCounts = now;
      await this.writeCounts();
      await this.progress.markQueued(this.pool?.idle === 0);
    }
  }

  // ── expiry and cancellation ────────────────────────────────────────────

  private async markExpired(): Promise<void> {
    await this.q.markExpired.execute({ before: nowSeconds() + 1 });
  }

  /** Tells Workers running shards of a stopped batch to drain the rest as errors. */
  private async sendStops(): Promise<void> {
    const running = new Set([...this.live.values()].map((l) => l.batchId));
    if (running.size === 0) return;
    const { batches } = this.ctx.db.t;
    const stopped = await this.ctx.db
      .select({ id: batches.id, stopReason: batches.stopReason })
      .from(batches)
      .where(and(inArray(batches.id, [...running]), sql`${batches.stopReason} IS NOT NULL`));
    for (const b of stopped) {
      if (this.stopsSent.has(b.id)) continue;
      this.stopsSent.add(b.id);
      this.pool?.broadcast({ type: "stop", batchId: b.id, code: stopCodeOf(b.stopReason)! });
    }
  }

  // ── leases ─────────────────────────────────────────────────────────────

  private async renewLeases(now: number): Promise<void> {
    const until = now + this.ctx.config.batches.leaseMs;
    await this.q.renewShardLeases.execute({ until });
    await this.q.renewBatchLeases.execute({ until });
  }

  /** A lease whose owner stopped renewing it (expired), or whose process on this host is gone, is free. */
  private ownerIsDead(owner: string | null, leaseExpiresAt: number | null, now: number): boolean {
    if (!owner) return true;
    if (owner === this.owner) return false;
    // Leases lapse by time, but not by time the database was away: after an
    // outage this node saw, a lease that lapsed meanwhile is its owner's for
    // one more lease period, in which a live owner renews it (at its first tick back).
    if ((leaseExpiresAt ?? 0) < now && now - this.backAt >= this.ctx.config.batches.leaseMs) return true;
    return processGone(owner, this.owner);
  }

  /** Shards running in this process now. */
  get liveShards(): number {
    return this.live.size;
  }

  private async releaseDeadLeases(now: number): Promise<void> {
    const { batchShards } = this.ctx.db.t;
    const held = await this.q.runningShards.execute();
    for (const s of held) {
      if (!this.ownerIsDead(s.owner, s.exp, now)) continue;
      await this.ctx.db
        .update(batchShards)
        .set({ status: "pending", leaseOwner: null, leaseExpiresAt: null })
        .where(and(eq(batchShards.batchId, s.batchId), eq(batchShards.idx, s.idx), eq(batchShards.status, "running"), s.owner ? eq(batchShards.leaseOwner, s.owner) : isNull(batchShards.leaseOwner)));
    }
  }

  /** Takes the batch-level lease (validating, finalizing) if free or dead. */
  private async claimBatch(b: BatchRow, now: number): Promise<boolean> {
    if (b.leaseOwner === this.owner) return true;
    if (!this.ownerIsDead(b.leaseOwner, b.leaseExpiresAt, now)) return false;
    const { batches } = this.ctx.db.t;
    const res = await this.ctx.db
      .update(batches)
      .set({ leaseOwner: this.owner, leaseExpiresAt: now + this.ctx.config.batches.leaseMs })
      .where(and(eq(batches.id, b.id), b.leaseOwner ? eq(batches.leaseOwner, b.leaseOwner) : isNull(batches.leaseOwner)))
      .returning({ id: batches.id });
    return res.length === 1;
  }

  // ── validating ─────────────────────────────────────────────────────────

  private async startValidations(now: number): Promise<void> {
    const { files, batchShards } = this.ctx.db.t;
    const waiting = await this.q.waitingValidation.execute();
    for (const b of waiting) {
      if (this.validations.has(b.id) || !(await this.claimBatch(b, now))) continue;
      const [file] = await this.ctx.db.select().from(files).where(eq(files.id, b.inputFileId));
      if (!file) {
        await this.failBatch(b, [{ code: "invalid_file", message: "The input file no longer exists", param: "input_file_id", line: null }]);
        continue;
      }
      const input = this.ctx.store.locate(file.id);
      const cuts = await shardBoundaries(this.ctx.store.open(file.id), file.bytes);
      await this.ctx.db.transaction(async (tx) => {
        await tx.delete(batchShards).where(eq(batchShards.batchId, b.id));
        for (let i = 0; i < cuts.length; i += 500)
          await tx.insert(batchShards).values(cuts.slice(i, i + 500).map((c, j) => ({ batchId: b.id, idx: i + j, startByte: c.start, endByte: c.end, status: "validating" })));
      });
      mkdirSync(batchDir(this.ctx, b.id), { recursive: true });
      // The endpoint's module says which models answer it (upstream ones and its built-in).
      const kind = kindOfUrl(b.endpoint);
      const allowedModels = kind ? this.registry.list().filter((m) => serves(kind, m.kind)).map((m) => m.id) : [];
      const tasks: WorkerTask[] = cuts.map((c, idx) => ({ type: "validate", batchId: b.id, idx, input, start: c.start, end: c.end, endpoint: b.endpoint, models: allowedModels }));
      const v: Validation = { batch: b, results: cuts.map(() => null), left: cuts.length, tasks };
      this.validations.set(b.id, v);
      this.ctx.log.info("batch validating", { batch_id: b.id, status: b.status, shards: cuts.length });
      this.queue.push(...tasks);
    }
  }

  private async onValidated(batchId: string, idx: number, result: ValidateResult): Promise<void> {
    const v = this.validations.get(batchId);
    if (!v || v.left <= 0 || v.results[idx]) return;
    v.results[idx] = result;
    if (--v.left > 0) return;
    // The entry stays until the outcome is committed: a tick meanwhile still
    // sees the batch in `validating` and must not start validating it again.
    try {
      await this.validationDone(batchId, v);
    } finally {
      if (this.validations.get(batchId) === v) this.validations.delete(batchId);
    }
  }

  private async validationDone(batchId: string, v: Validation): Promise<void> {
    const { batches } = this.ctx.db.t;
    const [b] = await this.ctx.db.select().from(batches).where(eq(batches.id, batchId));
    if (!b || b.status === "failed") return;
    // Local line numbers become file line numbers by adding earlier shards' lines.
    let offset = 0;
    let total = 0;
    let model: string | null = null;
    const errors: { code: string; message: string; param: string | null; line: number | null }[] = [];
    const firstLines: number[] = [];
    for (const r of v.results as ValidateResult[]) {
      firstLines.push(offset + 1);
      for (const e of r.errors) if (errors.length < MAX_REPORTED_ERRORS) errors.push({ ...e, line: e.line + offset, message: e.message.replace(/^Line \d+/, `Line ${e.line + offset}`) });
      offset += r.lines;
      total += r.requests;
      model ??= r.firstModel;
    }
    if (errors.length > 0 && !b.stopReason) return this.failBatch(b, errors);
    const now = nowSeconds();
    await this.ctx.db.transaction(async (tx) => {
      // (On SQLite the prepared statement runs on the one connection, inside
      // this transaction; on Postgres each shard's update goes through `tx`.)
      const results = v.results as ValidateResult[];
      if (this.ctx.db.engine === "sqlite") for (let i = 0; i < results.length; i++) await this.q.shardValidated.execute({ batchId, idx: i, firstLine: firstLines[i]!, requests: results[i]!.requests });
      else await shardsValidated(tx, this.ctx.db.t, batchId, results.map((r, i) => ({ idx: i, firstLine: firstLines[i]!, requests: r.requests })));
      await tx
        .update(batches)
        .set(
          b.status === "cancelling"
            ? { model, total, leaseOwner: null, leaseExpiresAt: null }
            : { status: "in_progress", inProgressAt: now, model, total, leaseOwner: null, leaseExpiresAt: null },
        )
        .where(eq(batches.id, batchId));
    });
    this.ctx.log.info("batch in progress", { batch_id: batchId, status: b.status === "cancelling" ? "cancelling" : "in_progress", total, shards: v.results.length });
    this.kick();
  }

  private async failBatch(b: BatchRow, errors: { code: string; message: string; param: string | null; line: number | null }[]): Promise<void> {
    const { batches, batchShards } = this.ctx.db.t;
    await this.ctx.db.transaction(async (tx) => {
      // Nothing ran: request_counts are all 0 (completed + failed = total holds).
      await tx
        .update(batches)
        .set({ status: "failed", failedAt: nowSeconds(), errors, total: 0, completed: 0, failed: 0, leaseOwner: null, leaseExpiresAt: null })
        .where(eq(batches.id, b.id));
      await tx.delete(batchShards).where(eq(batchShards.batchId, b.id));
      await recordBatchEvent(tx, this.ctx.db.t, b, "failed");
    });
    this.ctx.log.info("batch failed validation", { batch_id: b.id, status: "failed", errors: errors.length, first_error: errors[0]?.message });
  }

  // ── running shards ─────────────────────────────────────────────────────

  /** Validation tasks waiting for a worker (they go before run tasks: a batch should fail fast). */
  private readonly queue: WorkerTask[] = [];

  private async dispatchShards(now: number): Promise<void> {
    const pool = this.getPool();
    while (this.queue.length > 0 && pool.idle > 0) pool.dispatch(this.queue.shift()!);
    if (pool.idle === 0 || this.stopping) return;
    const idle = pool.idle;
    const claimed = await claimShards(this.ctx.db, this.owner, now + this.ctx.config.batches.leaseMs, idle, this.ctx.config.batches.hourSeconds);
    for (const [i, { shard, batch }] of claimed.entries()) {
      // Stopping meanwhile, or more than asked for: what cannot run now goes back at once.
      if (this.stopping || i >= idle) {
        this.recordRelease(shard.batchId, shard.idx);
        continue;
      }
      const ids = resultFileIds(batch.id);
      const claim = shard.claims;
      const out = this.ctx.store.partTarget(ids.out, shard.idx, claim);
      const err = this.ctx.store.partTarget(ids.err, shard.idx, claim);
      this.live.set(`${shard.batchId}/${shard.idx}`, { batchId: shard.batchId, idx: shard.idx, totals: zeroTotals() });
      this.progress.track(batch);
      this.keyOf(batch);
      mkdirSync(batchDir(this.ctx, batch.id), { recursive: true });
      pool.dispatch({
        type: "run",
        batchId: batch.id,
        idx: shard.idx,
        input: this.ctx.store.locate(batch.inputFileId),
        start: shard.startByte,
        end: shard.endByte,
        endpoint: batch.endpoint,
        outPath: partPath(this.ctx, batch.id, "out", shard.idx),
        errPath: partPath(this.ctx, batch.id, "err", shard.idx),
        partTargets: out && err ? { out, err } : null,
        claim,
        stopCode: stopCodeOf(batch.stopReason),
        deadline: batch.expiresAt * 1000,
        maxAttempts: this.ctx.config.batches.maxAttempts,
        retryBaseMs: this.ctx.config.batches.retryBaseMs,
        concurrency: 64,
      });
    }
  }

  /** Scheduler slots held by Workers' requests, by worker then request id. */
  private readonly slots = new Map<Worker, Map<number, Release>>();

  /** Grants not yet sent, by worker: sent together at the end of the turn. */
  private readonly pendingGrants = new Map<Worker, number[]>();

  /** Workers whose slots were given back: a late message from one must not take new ones. */
  private readonly released = new WeakSet<Worker>();

  private onSlotMessage(m: Extract<FromWorker, { type: "slots" }>, worker: Worker): void {
    if (this.released.has(worker)) return;
    let held = this.slots.get(worker);
    if (!held) this.slots.set(worker, (held = new Map()));
    // Releases first: a turn's releases free slots for its own asks.
    for (const reqId of m.release) {
      held.get(reqId)?.();
      held.delete(reqId);
    }
    for (const model of m.pump) this.ctx.scheduler.pump(model);
    const mine = held;
    for (const [reqId, modelId, batchId] of m.acquire) {
      const model = this.registry.get(modelId);
      if (!model) continue;
      // Served in the batch order (batches/order.ts): the key of the batch this Worker runs.
      this.ctx.scheduler.acquireBatch(model, undefined, this.keys.get(batchId)?.key).then((release) => {
        // The Worker died meanwhile (its slots were given back): give this one back too.
        if (this.slots.get(worker) !== mine) return release();
        mine.set(reqId, release);
        this.grantSoon(worker, reqId);
      });
    }
  }

  private grantSoon(worker: Worker, reqId: number): void {
    const list = this.pendingGrants.get(worker);
    if (list) return void list.push(reqId);
    this.pendingGrants.set(worker, [reqId]);
    queueMicrotask(() => {
      const reqIds = this.pendingGrants.get(worker)!;
      this.pendingGrants.delete(worker);
      worker.postMessage({ type: "grants", reqIds } satisfies ToWorker);
    });
  }

  /** A Worker that died or was stopped gives back every slot it held; `took`: its count of slots it took itself. */
  private releaseSlotsOf(worker: Worker, took: Int32Array): void {
    this.released.add(worker);
    for (const release of this.slots.get(worker)?.values() ?? []) release();
    this.slots.delete(worker);
    // And the slots it had taken itself, straight from shared memory.
    for (const m of this.registry.list()) {
      const base = this.ctx.scheduler.sharedBase(m);
      if (base < 0) continue;
      this.ctx.scheduler.giveBack(m.id, Atomics.exchange(took, base / CELLS, 0));
    }
  }

  private onWorkerMessage(m: FromWorker, worker: Worker): void {
    if (m.type === "slots") return this.onSlotMessage(m, worker);
    if (m.type === "upstream_down") return this.registry.health.suspected(m.upstream, m.error);
    if ((m.type === "progress" || m.type === "done" || m.type === "paused" || m.type === "validated" || m.type === "failed") && m.metrics) applyWorkerMetrics(m.metrics);
    const key = `${m.batchId}/${m.idx}`;
    switch (m.type) {
      case "validated":
        this.failures.delete(key);
        this.later(this.onValidated(m.batchId, m.idx, m.result));
        break;
      case "progress": {
        const l = this.live.get(key);
        if (l) l.totals = m.totals;
        return;
      }
      case "done":
        this.live.delete(key);
        this.failures.delete(key);
        this.dirty.add(m.batchId);
        this.record("shard done", { batch_id: m.batchId, shard: m.idx }, () => shardDone(this.ctx, m.batchId, m.idx, m.totals, this.owner));
        break;
      case "paused":
        this.live.delete(key);
        this.recordRelease(m.batchId, m.idx);
        break;
      case "failed":
        this.live.delete(key);
        this.onTaskFailed(m);
        break;
    }
    this.kick();
  }

  /** Shard task failures in a row, by "batchId/idx" (cleared when the shard is done). */
  private readonly failures = new Map<string, number>();

  private onTaskFailed(m: Extract<FromWorker, { type: "failed" }>): void {
    const key = `${m.batchId}/${m.idx}`;
    const n = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, n);
    const delay = retryDelayMs(n);
    this.ctx.log.error("batch shard task failed", { batch_id: m.batchId, shard: m.idx, task: m.task, failures: n, retry_in_ms: delay, error: m.error });
    if (m.task === "run") {
      // The shard keeps its lease (renewed) until it is released for another try.
      setTimeout(() => {
        if (this.stopping) return;
        this.recordRelease(m.batchId, m.idx, () => this.kick());
      }, delay).unref();
      return;
    }
    const v = this.validations.get(m.batchId);
    if (!v) return;
    if (n < MAX_VALIDATE_FAILURES) {
      setTimeout(() => {
        if (this.stopping || this.validations.get(m.batchId) !== v) return;
        this.queue.push(v.tasks[m.idx]!);
        this.kick();
      }, delay).unref();
      return;
    }
    for (let i = 0; i < v.tasks.length; i++) this.failures.delete(`${m.batchId}/${i}`);
    v.left = -1; // no later result counts
    this.later(this.failBatch(v.batch, [{ code: "internal_error", message: `Part ${m.idx} of the input file could not be checked: ${m.error.split("\n")[0]!.slice(0, 300)}`, param: null, line: null }]).finally(() => {
      if (this.validations.get(m.batchId) === v) this.validations.delete(m.batchId);
    }));
  }

  /** A database write started from a Worker message or a timer: its failure is logged (the next tick decides again from the rows). */
  private later(p: Promise<unknown>): void {
    p.catch((e) => {
      const down = databaseUnavailable(e);
      if (down) this.noteUnavailable("batch runner writes", down);
      else this.ctx.log.error("batch runner: database write failed", { error: String(e?.stack ?? e) });
    });
  }

  /**
   * A write that records a shard's progress (its end, its release), tried
   * until it lands: never dropped, never a reason to run the shard again.
   * Until it lands the shard's row says `running` under this node's lease,
   * which the ticks renew, so nobody else takes the shard, and its answers
   * wait in its part files. (Dropped, as before, a shard that ended during a
   * Postgres restart stayed `running` for good: a batch stuck at 3,938 of
   * 4,000.) Each write must be idempotent; `still()` false ends the tries.
   */
  private record(what: string, fields: Record<string, unknown>, write: () => Promise<unknown>, still: () => boolean = () => true, then?: () => void): void {
    const p = (async () => {
      for (let attempt = 1; !this.abandoned && still(); attempt++) {
        try {
          await write();
          if (attempt > 1) this.ctx.log.info("batch progress recorded after retries", { what, attempts: attempt, ...fields });
          then?.();
          return;
        } catch (e) {
          const down = databaseUnavailable(e);
          if (down) this.noteUnavailable("batch progress records", down, { what, ...fields });
          else this.ctx.log.error("batch runner: database write failed, will retry", { what, attempt, ...fields, error: String((e as Error)?.stack ?? e) });
          await Bun.sleep(recordDelayMs(attempt, down !== null));
        }
      }
    })();
    this.recording.add(p);
    void p.finally(() => this.recording.delete(p));
  }

  /** Gives a shard this node holds but does not run back to pending (record()); not once it runs here again. */
  private recordRelease(batchId: string, idx: number, then?: () => void): void {
    const key = `${batchId}/${idx}`;
    this.record("shard released", { batch_id: batchId, shard: idx }, () => this.releaseShard(batchId, idx), () => !this.live.has(key), then);
  }

  private onWorkerCrash(task: WorkerTask | null, error: string, worker: Worker, held: Int32Array): void {
    this.releaseSlotsOf(worker, held);
    this.ctx.log.error("batch worker crashed", { error, batch_id: task?.batchId, shard: task?.idx });
    if (task?.type === "run" || task?.type === "validate") {
      this.live.delete(`${task.batchId}/${task.idx}`);
      this.onTaskFailed({ type: "failed", task: task.type, batchId: task.batchId, idx: task.idx, error: `the Worker crashed: ${error}` });
    }
    this.kick();
  }

  private async releaseShard(batchId: string, idx: number): Promise<void> {
    const { batchShards } = this.ctx.db.t;
    await this.ctx.db
      .update(batchShards)
      .set({ status: "pending", leaseOwner: null, leaseExpiresAt: null })
      .where(and(eq(batchShards.batchId, batchId), eq(batchShards.idx, idx), eq(batchShards.leaseOwner, this.owner)));
  }

  // ── progress and finalization ──────────────────────────────────────────

  /**
   * request_counts and usage = the sum of every shard's row. A running shard's
   * row first takes its live totals, field by field never lower than what the
   * row held: after a restart a shard reports its recovered totals only once
   * it has re-read its part files, and the counts must not go back meanwhile.
   * A done shard's row holds its exact totals (written by "done").
   */
  private async writeCounts(): Promise<void> {
    const ids = [...new Set([...this.live.values()].map((l) => l.batchId).concat([...this.dirty]))];
    this.dirty.clear();
    if (ids.length === 0) return;
    // Not one transaction: each statement stands on its own (a shard's row
    // only grows; a batch's counts are a sum read at one moment), and on
    // Postgres the prepared statements run on the pool, not a transaction's
    // connection. On SQLite the whole set still runs in one turn.
    try {
      for (const l of [...this.live.values()]) await this.q.shardCounts.execute({ ...l.totals, batchId: l.batchId, idx: l.idx });
      const running = new Set([...this.live.values()].map((l) => l.batchId));
      for (const id of ids) {
        const [sums] = await this.q.shardSums.execute({ id });
        await this.q.batchCounts.execute({ ...sums!, id });
        if (running.has(id)) await this.progress.counted(id, sums!.completed + sums!.failed);
      }
    } catch (e) {
      // Written again at the next turn (the database may be away for a while).
      for (const id of ids) this.dirty.add(id);
      throw e;
    }
  }

  private async startFinalizations(now: number): Promise<void> {
    const { batches } = this.ctx.db.t;
    const ready = await this.q.readyToFinalize.execute();
    for (const b of ready) {
      if (this.finalizing.has(b.id) || !(await this.claimBatch(b, now))) continue;
      this.finalizing.add(b.id);
      let row = b;
      if (!b.stopReason && b.status !== "finalizing") {
        [row] = (await this.ctx.db.update(batches).set({ status: "finalizing", finalizingAt: nowSeconds(), estimatedCompletionAt: null, statusDetailsCode: null, statusDetailsMessage: null, statusDetailsSince: null }).where(eq(batches.id, b.id)).returning()) as [BatchRow];
        this.ctx.log.info("batch finalizing", { batch_id: b.id, status: "finalizing" });
      }
      // Cut short, it runs again from the rows at a later tick (it is made to).
      finalizeBatch(this.ctx, row)
        .catch((e) => {
          const down = databaseUnavailable(e);
          if (down) this.noteUnavailable("batch finalization", down, { batch_id: b.id });
          else this.ctx.log.error("batch finalization failed", { batch_id: b.id, error: String(e?.stack ?? e) });
        })
        .finally(() => {
          this.finalizing.delete(b.id);
          this.stopsSent.delete(b.id);
        });
    }
  }

  // ── shutdown ───────────────────────────────────────────────────────────

  /** Checkpoints: Workers finish in-flight requests and flush; shards go back to pending. */
  async stop(graceMs = 7000): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    const pool = this.pool;
    const until = Date.now() + graceMs;
    if (pool) {
      pool.broadcast({ type: "checkpoint" });
      while (this.live.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      await pool.terminate();
      // (A Worker that crashed earlier gave its slots back then: these are all that hold any.)
      for (const { worker, held } of pool.members()) this.releaseSlotsOf(worker, held);
    }
    // A tick still running finishes first: it might claim or write after these.
    while (this.ticking) await new Promise((r) => setTimeout(r, 5));
    // Progress records still being tried land first, within the grace; after
    // it they are given up (the leases lapse, and whoever runs those shards
    // next finds their answers in the part files).
    while (this.recording.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    this.abandoned = true;
    const { batches, batchShards } = this.ctx.db.t;
    for (const l of this.live.values()) await this.releaseShard(l.batchId, l.idx);
    await this.ctx.db.update(batches).set({ leaseOwner: null, leaseExpiresAt: null }).where(eq(batches.leaseOwner, this.owner));
    await this.ctx.db.update(batchShards).set({ status: "pending", leaseOwner: null, leaseExpiresAt: null }).where(and(eq(batchShards.leaseOwner, this.owner), eq(batchShards.status, "running")));
  }
}

/** Postgres: each validated shard's row in the transaction (one statement each; they interleave with other work, never one long stall). */
async function shardsValidated(tx: Queryable, t: Tables, batchId: string, rows: { idx: number; firstLine: number; requests: number }[]): Promise<void> {
  const s = t.batchShards;
  for (const r of rows)
    await tx
      .update(s)
      .set({ status: "pending", firstLine: r.firstLine, requests: r.requests })
      .where(and(eq(s.batchId, batchId), eq(s.idx, r.idx)));
}

/**
 * A shard's exact totals once its Worker has written and flushed all of it.
 * Only while this node still holds the shard's lease: a node that lost it
 * (stalled past batches.lease_ms, so another took the shard over) must not
 * end a shard that another node now runs.
 */
async function shardDone(ctx: AppContext, batchId: string, idx: number, totals: ShardTotals, owner: string): Promise<void> {
  const s = ctx.db.t.batchShards;
  const done = await ctx.db
    .update(s)
    .set({ status: "done", leaseOwner: null, leaseExpiresAt: null, ...totals })
    .where(and(eq(s.batchId, batchId), eq(s.idx, idx), eq(s.status, "running"), eq(s.leaseOwner, owner)))
    .returning({ idx: s.idx });
  if (done.length === 0) {
    // Tried again after a lost connection: the earlier try may have committed.
    const [row] = await ctx.db.select({ status: s.status }).from(s).where(and(eq(s.batchId, batchId), eq(s.idx, idx)));
    if (row?.status === "done") return;
  }
  if (done.length === 0) ctx.log.warn("batch shard finished after its lease was lost: another node runs it", { batch_id: batchId, shard: idx });
}

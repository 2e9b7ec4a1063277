// The batch runner: one per process, on the main thread. It never holds the
// truth itself: batches and shards are claimed through rows with a lease
// (owner + expiry), results live in part files, and every decision is made
// again from the database on each tick. Per-line work happens in Workers.
//
// This file is the tick and the Workers' messages; each concern is a part:
//   runner/leases.ts       leases: renewed, taken over when their owner died, the database's absences
//   runner/validation.ts   the `validating` phase: shard rows, checks in Workers, the outcome
//   runner/runTask.ts      a claimed shard as a task for a Worker (claims: db/claims.ts)
//   runner/yields.ts       the batch order reaching Workers mid-shard
//   runner/slotBroker.ts   scheduler slots for Workers' lines, and given back when a Worker dies
//   runner/peakCap.ts      off-peak hours: which batches running here are capped
//   runner/stops.ts        expiry and cancellation
//   runner/counts.ts       request_counts, usage and the progress view, every COUNTS_MS
//   runner/finalizing.ts   the hand-off to finalize
//   runner/records.ts      writes started by a Worker's message, and those that must land
//   runner/live.ts         the shards running here
// The Worker pool is ./pool.ts, the Workers ./worker/, the order ./order.ts,
// the off-peak calendar ./peakHours.ts.
import type { AppContext } from "../context";
import { claimShards } from "../db/claims";
import { databaseUnavailable } from "../db/unavailable";
import type { ModelRegistry } from "../inference/registry";
import { applyWorkerMetrics } from "../metrics";
import { newNodeId } from "../nodes/identity";
import { WorkerPool } from "./pool";
import { BatchProgress, signalsOf } from "./statusDetails";
import { prepareTickQueries, type TickQueries } from "./tickQueries";
import type { FromWorker, PricedModel, WorkerTask } from "./types";
import { CountsWriter } from "./runner/counts";
import { Finalizing } from "./runner/finalizing";
import { Leases } from "./runner/leases";
import { LiveShards } from "./runner/live";
import { PeakCap } from "./runner/peakCap";
import { ProgressRecords, releaseShard } from "./runner/records";
import { runTaskOf } from "./runner/runTask";
import { SlotBroker } from "./runner/slotBroker";
import { Stops } from "./runner/stops";
import { Validations } from "./runner/validation";
import { Yields } from "./runner/yields";

const TICK_MS = 200;
const COUNTS_MS = 500;

/** A failing shard task is tried again after 1 s, 2 s, 4 s … at most 5 min: never in a hot loop. */
const retryDelayMs = (failures: number) => Math.min(1000 * 2 ** (failures - 1), 300_000);

export class BatchRunner {
  /** This node's id (src/nodes/identity.ts). */
  readonly owner: string;
  /** estimated_completion_at and status_details of the batches running here (docs/CONTRACT.md §18). */
  readonly progress: BatchProgress;
  private readonly q: TickQueries;
  private readonly live = new LiveShards();
  private readonly leases: Leases;
  private readonly records: ProgressRecords;
  private readonly peak: PeakCap;
  private readonly slots: SlotBroker;
  private readonly validations: Validations;
  private readonly stops: Stops;
  private readonly counts: CountsWriter;
  private readonly finalizing: Finalizing;
  private readonly yields: Yields;
  private pool: WorkerPool | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private ticking = false;
  private kicked = false;
  private stopping = false;
  private lastCounts = 0;
  /** Shard task failures in a row, by "batchId/idx" (cleared when the shard is done). */
  private readonly failures = new Map<string, number>();

  constructor(
    private readonly ctx: AppContext,
    private readonly registry: ModelRegistry,
  ) {
    this.owner = newNodeId(ctx.config.nodeName);
    this.q = prepareTickQueries(ctx.db, this.owner);
    this.progress = new BatchProgress(ctx.db, signalsOf(registry, ctx.scheduler));
    this.leases = new Leases(ctx, this.owner, this.q);
    this.records = new ProgressRecords(ctx, this.owner);
    this.peak = new PeakCap(ctx, (id) => this.progress.etaOf(id));
    this.progress.peakHours = (b) => this.peak.heldBack(b);
    this.slots = new SlotBroker(ctx.scheduler, registry, (id) => this.peak.keyFor(id));
    const claimBatch = this.leases.claimBatch.bind(this.leases);
    this.validations = new Validations(ctx, registry, this.q, claimBatch, () => this.kick());
    this.stops = new Stops(ctx, this.q);
    this.counts = new CountsWriter(this.q, this.live, this.progress);
    this.finalizing = new Finalizing(ctx, this.q, claimBatch, this.records, (id) => this.stops.forget(id));
    this.yields = new Yields(ctx, this.q, this.live, this.stops);
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
      .then(() => this.leases.databaseBack())
      .catch((e) => {
        const down = databaseUnavailable(e);
        if (down) return this.leases.databaseDown(down, this.live.size);
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

  /** Shards running in this process now. */
  get liveShards(): number {
    return this.live.size;
  }

  private async tick(): Promise<void> {
    const now = Date.now();
    this.peak.apply(now, this.live.batchIds());
    await this.stops.markExpired();
    this.registry.health.sweep();
    await this.leases.renew(now);
    await this.leases.releaseDead(now);
    await this.stops.send(this.live.batchIds(), this.pool);
    await this.validations.start(now);
    await this.dispatch(now);
    await this.finalizing.start(now);
    if (now - this.lastCounts >= COUNTS_MS) {
      this.lastCounts = now;
      await this.counts.write();
      await this.progress.markQueued(this.pool?.idle === 0);
    }
  }

  /** Validation tasks to Workers (never behind a shard: a batch should fail, or start, fast), then claimed shards to idle Workers, then yields. */
  private async dispatch(now: number): Promise<void> {
    const pool = this.getPool();
    const queue = this.validations.queue;
    while (queue.length > 0 && pool.canValidate) pool.dispatchValidation(queue.shift()!);
    if (this.stopping) return;
    const idle = pool.idle;
    if (idle > 0) {
      const claimed = await claimShards(this.ctx.db, this.owner, now + this.ctx.config.batches.leaseMs, idle, this.ctx.config.batches.hourSeconds);
      for (const [i, { shard, batch }] of claimed.entries()) {
        // Stopping meanwhile, or more than asked for: what cannot run now goes back at once.
        if (this.stopping || i >= idle) {
          this.releaseLater(shard.batchId, shard.idx);
          continue;
        }
        this.live.add(shard.batchId, shard.idx);
        this.progress.track(batch);
        this.peak.keyOf(batch);
        pool.dispatch(await runTaskOf(this.ctx, batch, shard));
      }
    }
    if (!this.stopping) await this.yields.check(now, pool);
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
      upstream: m.upstream,
      batchPriority: m.batchPriority,
      ownClient: m.ownClient,
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
      (tasks, error, worker, held) => this.onWorkerCrash(tasks, error, worker, held),
    );
    const sets = this.registry.replicas;
    if (sets && !this.pool.replicas) {
      this.pool.replicas = () => ({ cells: sets.cells, times: sets.times, sets: sets.snapshot() });
      sets.onChange(() => this.pool?.replicasChanged());
    }
    return this.pool;
  }

  private onWorkerMessage(m: FromWorker, worker: Worker): void {
    if (m.type === "slots") return this.slots.onMessage(m, worker);
    if (m.type === "upstream_down") return this.registry.health.suspected(m.upstream, m.error);
    if (m.metrics) applyWorkerMetrics(m.metrics);
    const key = `${m.batchId}/${m.idx}`;
    switch (m.type) {
      case "validated":
        this.failures.delete(key);
        this.records.later(this.validations.onValidated(m.batchId, m.idx, m.result));
        break;
      case "progress": {
        const l = this.live.get(m.batchId, m.idx);
        if (l) l.totals = m.totals;
        return;
      }
      case "done":
        this.live.delete(m.batchId, m.idx);
        this.failures.delete(key);
        this.counts.changed(m.batchId);
        this.records.recordDone(m.batchId, m.idx, m.totals);
        break;
      case "paused":
        // A checkpoint (shutdown) or a yield: the shard goes back to pending.
        this.live.delete(m.batchId, m.idx);
        this.releaseLater(m.batchId, m.idx);
        break;
      case "failed":
        if (m.task === "run") this.live.delete(m.batchId, m.idx);
        this.onTaskFailed(m);
        break;
    }
    this.kick();
  }

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
        this.releaseLater(m.batchId, m.idx, () => this.kick());
      }, delay).unref();
      return;
    }
    const forget = (shards: number) => {
      for (let i = 0; i < shards; i++) this.failures.delete(`${m.batchId}/${i}`);
    };
    this.records.later(this.validations.onFailed(m.batchId, m.idx, n, delay, m.error, () => this.stopping, forget));
  }

  /** Gives a shard this node holds but does not run back to pending (tried until it lands); not once it runs here again. */
  private releaseLater(batchId: string, idx: number, then?: () => void): void {
    this.records.recordRelease(batchId, idx, () => !this.live.has(batchId, idx), then);
  }

  private onWorkerCrash(tasks: WorkerTask[], error: string, worker: Worker, held: Int32Array): void {
    this.slots.releaseAll(worker, held);
    this.ctx.log.error("batch worker crashed", { error, batch_id: tasks[0]?.batchId, shard: tasks[0]?.idx, tasks: tasks.map((t) => `${t.type} ${t.batchId}/${t.idx}`) });
    for (const task of tasks) {
      if (task.type === "run") this.live.delete(task.batchId, task.idx);
      this.onTaskFailed({ type: "failed", task: task.type, batchId: task.batchId, idx: task.idx, error: `the Worker crashed: ${error}` });
    }
    this.kick();
  }

  /** Checkpoints: Workers finish in-flight requests and flush; shards go back to pending. */
  async stop(graceMs = 7000): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    const pool = this.pool;
    const until = Date.now() + graceMs;
    if (pool) {
      pool.broadcast({ type: "checkpoint" });
      while (this.live.size > 0 && Date.now() < until) await Bun.sleep(20);
      await pool.terminate();
      // (A Worker that crashed earlier gave its slots back then: these are all that hold any.)
      for (const { worker, held } of pool.members()) this.slots.releaseAll(worker, held);
    }
    // A tick still running finishes first: it might claim or write after these.
    while (this.ticking) await Bun.sleep(5);
    // Progress records still being tried land first, within the grace.
    await this.records.settle(until);
    for (const l of this.live.values()) await releaseShard(this.ctx, this.owner, l.batchId, l.idx);
    await this.leases.releaseAll();
  }
}

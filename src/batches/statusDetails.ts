// A running batch's `estimated_completion_at` and `status_details` (docs/CONTRACT.md §18):
// when it should end at its recent rate, and why it is not moving.
//
// Decided on the node that runs the batch's shards (only it sees the upstream
// gate its Workers wait at, and the 429 pauses of its upstream), and written
// into the batch's row, because the node that answers GET /batches/{id} may
// be another one. Written at the runner's periodic counts write (every
// 500 ms) and only when something changed: a new reason, or an estimate
// that moved by more than a little — never per line.
//
// A batch that no node runs because every Worker is busy is "queued": any
// node whose Workers are all busy marks it so, with one statement, since no
// runner holds it (markQueued). The node that later takes one of its shards
// writes its own view at once (track() forgets what it had written).
//
// Stopping (cancel, expiry), finalizing and the final states clear both
// (cancelBatch, tickQueries' markExpired, the runner's finalizing update,
// finalize.ts), and batchView sends null for a finished batch whatever the
// row holds.
import { and, eq, isNull, ne, or, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import type { ModelRegistry } from "../inference/registry";
import type { Scheduler } from "../inference/admission/scheduler";
import { rateLimitedNow } from "../inference/upstream/health";

export const STATUS_DETAIL_CODES = ["upstream_down", "rate_limited", "peak_hours", "queued"] as const;
export type StatusDetailCode = (typeof STATUS_DETAIL_CODES)[number];

/** As sent in the batch record: `since` in Unix seconds. */
export interface StatusDetails {
  code: StatusDetailCode;
  message: string;
  since: number;
}

/** What the runner knows of a batch it runs (from the row it claimed a shard with). */
export interface TrackedBatch {
  id: string;
  model: string | null;
  total: number;
  completionWindow: string;
  /** Unix seconds. */
  expiresAt: number;
}

/**
 * Peak hours (docs/CONTRACT.md §18, batches.peak_hours): set by whoever caps batches
 * during peak hours; returns a message (e.g. "peak hours until 20:00
 * Europe/Berlin: limited to 25% of the model's capacity") while `batch` is
 * held back by them, else null. The runner sets it (runner/peakCap.ts heldBack).
 */
export type PeakHoursHook = (batch: TrackedBatch, nowMs: number) => string | null;

/** What the node sees of a model's upstream and capacity now. */
export interface Signals {
  /** The model's upstream (null: a built-in model): its name, since when it is down (ms; null while up), and whether 429s hold it back. */
  upstream(model: string): { name: string; downSince: number | null; rateLimited: boolean } | null;
  /**
   * Lines of batch `batchId` wait here for a scheduler slot of the model
   * (its concurrency is in use): "interactive" while interactive requests
   * hold some of it, else "batches"; null when none of its lines waits (its
   * lines in flight at the engine are running, not queued, however long
   * they take).
   */
  waitingForCapacity(model: string, batchId: string): "interactive" | "batches" | null;
}

/** A 429 within this long still counts as rate limited (a pause is 1 s by default: this bridges the gaps between them). */
const RATE_LIMITED_MS = 5000;
/** The completion rate is measured over this long. */
const RATE_WINDOW_MS = 30_000;
/** No estimate before the samples span this long. */
const MIN_SPAN_MS = 1000;
/** A batch whose count has not moved for this long is not moving (capacity taken by others: "queued"). */
const STALL_MS = 2000;
/** Entries not seen for this long are dropped (their batches ended or went elsewhere). */
const FORGET_MS = 60_000;

export const QUEUED_MESSAGE = "waiting for a batch Worker: all are busy with other batches";

/** The signals of this node: upstream health (inference/upstream/monitor.ts) and the scheduler's queues. */
export function signalsOf(registry: ModelRegistry, scheduler: Scheduler): Signals {
  return {
    upstream(model) {
      const m = registry.get(model);
      if (!m || m.upstreamIdx < 0) return null;
      const info = registry.health.downInfo(m.upstreamIdx);
      if (!info) return null;
      return { name: info.name, downSince: info.downSince, rateLimited: rateLimitedNow(registry.health.mem, m.upstreamIdx, RATE_LIMITED_MS) };
    },
    waitingForCapacity(model, batchId) {
      if (!scheduler.batchWaiting(model, batchId)) return null;
      const s = scheduler.stats(model);
      return s.inFlight > s.batchInFlight ? "interactive" : "batches";
    },
  };
}

/**
 * Why a batch that runs here is not moving, or null. `stalled`: its count
 * has not moved for STALL_MS; `othersMoving`: another batch on the same
 * model has moved meanwhile (a stalled batch whose own lines hold the
 * capacity is slow, not queued).
 */
export function decide(
  b: TrackedBatch,
  s: Signals,
  stalled: boolean,
  othersMoving: boolean,
  nowMs: number,
  peakHours: PeakHoursHook | null,
): { code: StatusDetailCode; message: string; sinceMs: number | null } | null {
  const up = b.model ? s.upstream(b.model) : null;
  if (up?.downSince != null) return { code: "upstream_down", message: `upstream ${up.name} is down`, sinceMs: up.downSince };
  if (up?.rateLimited) return { code: "rate_limited", message: `upstream ${up.name} answers 429 (rate limited): dispatch slowed`, sinceMs: null };
  const peak = peakHours?.(b, nowMs);
  if (peak) return { code: "peak_hours", message: peak, sinceMs: null };
  if (!stalled || !b.model) return null;
  const cap = s.waitingForCapacity(b.model, b.id);
  if (cap === "interactive") return { code: "queued", message: `waiting for capacity on model ${b.model}: interactive requests go first`, sinceMs: null };
  if (cap === "batches" && othersMoving) return { code: "queued", message: `waiting for capacity on model ${b.model} behind other batches`, sinceMs: null };
  return null;
}

/** estimated_completion_at (Unix s) from samples [ms, lines done], or null while no rate is known. */
export function estimate(samples: readonly [number, number][], total: number, nowMs: number): number | null {
  if (samples.length < 2) return null;
  const [t0, d0] = samples[0]!;
  const [t1, d1] = samples[samples.length - 1]!;
  if (t1 - t0 < MIN_SPAN_MS || d1 <= d0) return null;
  const left = Math.max(0, total - d1);
  return Math.ceil((nowMs + (left * (t1 - t0)) / (d1 - d0)) / 1000);
}

interface Written {
  eta: number | null;
  code: string | null;
  message: string | null;
  since: number | null;
}

interface Entry {
  batch: TrackedBatch;
  /** [ms, completed + failed], oldest first, over RATE_WINDOW_MS. */
  samples: [number, number][];
  /** What this node last wrote into the row (undefined: nothing yet, or since it took a shard again). */
  written: Written | undefined;
  seenAt: number;
  /** When its count last grew (ms; 0: not seen to). */
  movedAt: number;
}

function prepare(db: Db) {
  const { batches, batchShards: s } = db.t;
  const p = (name: string) => sql`${sql.placeholder(name)}`;
  return {
    write: db
      .update(batches)
      .set({ estimatedCompletionAt: p("eta"), statusDetailsCode: p("code"), statusDetailsMessage: p("message"), statusDetailsSince: p("since") })
      .where(and(eq(batches.id, sql.placeholder("id")), eq(batches.status, "in_progress"), isNull(batches.stopReason)))
      .prepare("progress_write"),
    /** Running batches with work waiting and none of it running anywhere. */
    queued: db
      .update(batches)
      .set({ estimatedCompletionAt: null, statusDetailsCode: "queued", statusDetailsMessage: QUEUED_MESSAGE, statusDetailsSince: p("now") })
      .where(
        and(
          eq(batches.status, "in_progress"),
          isNull(batches.stopReason),
          or(isNull(batches.statusDetailsCode), ne(batches.statusDetailsCode, "queued")),
          sql`EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} = 'pending')`,
          sql`NOT EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${batches.id} AND ${s.status} = 'running')`,
        ),
      )
      .prepare("progress_queued"),
  };
}

/** One per runner: the batches whose shards run on this node. */
export class BatchProgress {
  /** docs/CONTRACT.md §18 peak hours: see PeakHoursHook. */
  peakHours: PeakHoursHook | null = null;
  private readonly entries = new Map<string, Entry>();
  private readonly q: ReturnType<typeof prepare>;

  constructor(
    db: Db,
    private readonly signals: Signals,
  ) {
    this.q = prepare(db);
  }

  /** estimated_completion_at (Unix s) of a batch running here at its recent rate, or null (the peak cap's deadline override). */
  etaOf(id: string, nowMs = Date.now()): number | null {
    const e = this.entries.get(id);
    return e ? estimate(e.samples, e.batch.total, nowMs) : null;
  }

  /** This node took a shard of `b`: it writes its view of the batch at the next counts write (another node, or markQueued, may have written since). */
  track(b: TrackedBatch, nowMs = Date.now()): void {
    const batch = { id: b.id, model: b.model, total: b.total, completionWindow: b.completionWindow, expiresAt: b.expiresAt };
    const e = this.entries.get(b.id);
    if (!e) return void this.entries.set(b.id, { batch, samples: [], written: undefined, seenAt: nowMs, movedAt: 0 });
    e.batch = batch;
    e.written = undefined;
    e.seenAt = nowMs;
    // Back after a pause (it waited for a Worker): the time away is not its rate.
    const last = e.samples[e.samples.length - 1];
    if (last && nowMs - last[0] > 2 * STALL_MS) e.samples.length = 0;
  }

  /** At the counts write, for a batch with shards running here: `done` = its completed + failed (all nodes). Writes the row if the view changed. */
  async counted(id: string, done: number, nowMs = Date.now()): Promise<void> {
    const e = this.entries.get(id);
    if (!e) return;
    e.seenAt = nowMs;
    const samples = e.samples;
    const last = samples[samples.length - 1];
    if (last && done < last[1]) samples.length = 0; // counts went back (a restart): measure again
    if (last && done > last[1]) e.movedAt = nowMs;
    samples.push([nowMs, done]);
    while (samples.length > 2 && nowMs - samples[1]![0] >= RATE_WINDOW_MS) samples.shift();
    // The count has not moved over the last STALL_MS.
    const ref = samples.findLast((x) => nowMs - x[0] >= STALL_MS);
    const stalled = ref !== undefined && ref[1] === done;
    let othersMoving = false;
    for (const o of this.entries.values()) if (o !== e && o.batch.model === e.batch.model && nowMs - o.seenAt < STALL_MS && nowMs - o.movedAt < STALL_MS) othersMoving = true;
    const d = decide(e.batch, this.signals, stalled, othersMoving, nowMs, this.peakHours);
    const prev = e.written;
    // A reason keeps its `since` while it stays.
    const since = d ? (d.sinceMs !== null ? Math.floor(d.sinceMs / 1000) : prev?.code === d.code && prev.since !== null ? prev.since : Math.floor(nowMs / 1000)) : null;
    // Not moving at all: no estimate (a rate from before would promise too much).
    const eta = d?.code === "upstream_down" || d?.code === "queued" ? null : estimate(samples, e.batch.total, nowMs);
    const next: Written = { eta, code: d?.code ?? null, message: d?.message ?? null, since };
    if (prev && !changed(prev, next, nowMs)) return;
    await this.q.write.execute({ id, ...next });
    e.written = next;
  }

  /**
   * Called at each counts write while every Worker of this node is busy:
   * running batches that no node runs now (work waiting, none running) are
   * marked queued. Also drops entries of batches not seen for a while.
   */
  async markQueued(allBusy: boolean, nowMs = Date.now()): Promise<void> {
    for (const [id, e] of this.entries) if (nowMs - e.seenAt > FORGET_MS) this.entries.delete(id);
    if (allBusy) await this.q.queued.execute({ now: Math.floor(nowMs / 1000) });
  }
}

/** A new reason, or an estimate that moved by more than 2 s and 2% of the time left. */
function changed(a: Written, b: Written, nowMs: number): boolean {
  if (a.code !== b.code || a.message !== b.message || a.since !== b.since) return true;
  if (a.eta === null || b.eta === null) return a.eta !== b.eta;
  const left = Math.max(0, b.eta - nowMs / 1000);
  return Math.abs(a.eta - b.eta) > Math.max(2, left * 0.02);
}

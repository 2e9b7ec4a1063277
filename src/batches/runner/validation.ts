// The `validating` phase of a batch, on the node that holds its batch-level
// lease: cut the input into shards (rows in `validating`), check each shard
// in a Worker (every line's url is the batch's endpoint, its model one that
// answers it), then either fail the batch with the first errors (line
// numbers of the whole file) or make its shards pending, in one transaction.
//
// Validation tasks wait here, not behind run tasks: they go to an idle
// Worker, or ride along on one whose shard waits on its upstream
// (../pool.ts), so a new batch is checked within a tick however long the
// running shards are. Batches' tasks take turns (one each, round robin),
// so a small batch's one task does not wait behind a big batch's hundreds.
import { mkdirSync } from "node:fs";
import { eq } from "drizzle-orm";
import type { AppContext } from "../../context";
import { kindOfUrl } from "../../endpoints";
import { serves } from "../../endpoints/kind";
import { nowSeconds } from "../../ids";
import type { ModelRegistry } from "../../inference/registry";
import { recordBatchEvent } from "../../webhooks/outbox";
import { batchDir } from "../paths";
import type { BatchRow } from "../service";
import { fileLocator } from "../../files/content";
import { narrowLocator, openLocator } from "../../storage/locator";
import { shardBoundaries } from "../shards";
import { shardsCut, shardsValidated } from "../shardStatus";
import type { TickQueries } from "../tickQueries";
import type { ValidateResult, ValidateTask } from "../types";

const MAX_REPORTED_ERRORS = 100;
/** Validation of a shard that fails this often fails the batch (a run task keeps backing off: its work is not lost). */
export const MAX_VALIDATE_FAILURES = 3;

type BatchError = { code: string; message: string; param: string | null; line: number | null };

interface Validation {
  batch: BatchRow;
  results: (ValidateResult | null)[];
  left: number;
  tasks: ValidateTask[];
}

/** Validation tasks waiting for a Worker, one batch's at a time in turn. */
class ValidationQueue {
  private readonly byBatch = new Map<string, ValidateTask[]>();
  private n = 0;

  get length(): number {
    return this.n;
  }

  push(...tasks: ValidateTask[]): void {
    for (const t of tasks) {
      let q = this.byBatch.get(t.batchId);
      if (!q) this.byBatch.set(t.batchId, (q = []));
      q.push(t);
      this.n++;
    }
  }

  /** The next batch's first task; that batch goes to the back of the turns. */
  shift(): ValidateTask | undefined {
    for (const [id, q] of this.byBatch) {
      this.byBatch.delete(id);
      const t = q.shift();
      if (q.length > 0) this.byBatch.set(id, q);
      if (t) {
        this.n--;
        return t;
      }
    }
    return undefined;
  }
}

export class Validations {
  private readonly running = new Map<string, Validation>();
  readonly queue = new ValidationQueue();

  constructor(
    private readonly ctx: AppContext,
    private readonly registry: ModelRegistry,
    private readonly q: TickQueries,
    private readonly claimBatch: (b: BatchRow, now: number) => Promise<boolean>,
    /** Runs a tick soon (the batch's shards are pending: claim them). */
    private readonly kick: () => void,
  ) {}

  /** At each tick: batches waiting for validation whose lease this node takes get their shard rows and queued tasks. */
  async start(now: number): Promise<void> {
    const { files } = this.ctx.db.t;
    const waiting = await this.q.waitingValidation.execute();
    for (const b of waiting) {
      if (this.running.has(b.id) || !(await this.claimBatch(b, now))) continue;
      const [file] = await this.ctx.db.select().from(files).where(eq(files.id, b.inputFileId));
      if (!file) {
        await this.failBatch(b, [{ code: "invalid_file", message: "The input file no longer exists", param: "input_file_id", line: null }]);
        continue;
      }
      // One blob, or a File made of an Upload's parts (each task gets the parts its shard reads).
      const input = await fileLocator(this.ctx, file.id);
      const cuts = await shardBoundaries(openLocator(input), file.bytes);
      await this.ctx.db.transaction((tx) => shardsCut(tx, this.ctx.db.t, b.id, cuts));
      mkdirSync(batchDir(this.ctx, b.id), { recursive: true });
      // The endpoint's module says which models answer it (upstream ones and its built-in).
      const kind = kindOfUrl(b.endpoint);
      // An upstream with api "anthropic" answers Anthropic's Messages only (docs/CONTRACT.md §22): not an OpenAI batch's lines.
      const allowedModels = kind ? this.registry.list().filter((m) => serves(kind, m.kind) && (m.api !== "anthropic" || kind.path === "/messages")).map((m) => m.id) : [];
      const tasks: ValidateTask[] = cuts.map((c, idx) => ({ type: "validate", batchId: b.id, idx, ...narrowLocator(input, c.start, c.end), endpoint: b.endpoint, models: allowedModels }));
      this.running.set(b.id, { batch: b, results: cuts.map(() => null), left: cuts.length, tasks });
      this.ctx.log.info("batch validating", { batch_id: b.id, status: b.status, shards: cuts.length });
      this.queue.push(...tasks);
    }
  }

  /** A Worker checked one shard. Once all are, the outcome is committed. */
  async onValidated(batchId: string, idx: number, result: ValidateResult): Promise<void> {
    const v = this.running.get(batchId);
    if (!v || v.left <= 0 || v.results[idx]) return;
    v.results[idx] = result;
    if (--v.left > 0) return;
    // The entry stays until the outcome is committed: a tick meanwhile still
    // sees the batch in `validating` and must not start validating it again.
    try {
      await this.done(batchId, v);
    } finally {
      if (this.running.get(batchId) === v) this.running.delete(batchId);
    }
  }

  /**
   * A shard's check failed (`failures`: in a row): queued again after
   * `delayMs` unless this was the last try, which fails the batch.
   * `forget(n)` clears the failure counts of the batch's n shards.
   */
  async onFailed(batchId: string, idx: number, failures: number, delayMs: number, error: string, stopping: () => boolean, forget: (shards: number) => void): Promise<void> {
    const v = this.running.get(batchId);
    if (!v) return;
    if (failures < MAX_VALIDATE_FAILURES) {
      setTimeout(() => {
        if (stopping() || this.running.get(batchId) !== v) return;
        this.queue.push(v.tasks[idx]!);
        this.kick();
      }, delayMs).unref();
      return;
    }
    forget(v.tasks.length);
    v.left = -1; // no later result counts
    try {
      await this.failBatch(v.batch, [{ code: "internal_error", message: `Part ${idx} of the input file could not be checked: ${error.split("\n")[0]!.slice(0, 300)}`, param: null, line: null }]);
    } finally {
      if (this.running.get(batchId) === v) this.running.delete(batchId);
    }
  }

  private async done(batchId: string, v: Validation): Promise<void> {
    const { batches } = this.ctx.db.t;
    const [b] = await this.ctx.db.select().from(batches).where(eq(batches.id, batchId));
    if (!b || b.status === "failed") return;
    // Local line numbers become file line numbers by adding earlier shards' lines.
    let offset = 0;
    let total = 0;
    let model: string | null = null;
    const errors: BatchError[] = [];
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
      const results = v.results as ValidateResult[];
      await shardsValidated(this.ctx.db, tx, this.q.shardValidated, batchId, results.map((r, i) => ({ idx: i, firstLine: firstLines[i]!, requests: r.requests })));
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

  private async failBatch(b: BatchRow, errors: BatchError[]): Promise<void> {
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
}

// Messages between the batch runner (main thread) and its Workers.
import type { ModelSpec } from "../inference/registry";
import type { WorkerMetricsDelta } from "../metrics/worker";
import type { HealthMemory } from "../inference/upstream/health";
import type { BlobLocator } from "../storage/locator";
import type { PartTarget } from "../storage/blobStore";
import type { ThreadSettings } from "../threadSettings";
import type { ReplicaView } from "../inference/replicas/pick";

/** The replica cells all threads share, and which replicas of each upstream take work. */
export interface ReplicaState {
  cells: Int32Array;
  /** When each replica's engine load was read. */
  times: Float64Array;
  sets: Record<string, ReplicaView[]>;
}

export interface PricedModel extends ModelSpec {
  inputPerMillion: number;
  outputPerMillion: number;
  /** True when the model has a concurrency limit: each request then needs a slot from the main thread's scheduler. */
  limited: boolean;
  /** Where the model's slot cells start in the scheduler's shared memory, or -1 (slots only through messages). */
  sharedBase: number;
}

export interface ShardRef {
  batchId: string;
  idx: number;
  /** The input file (a local path or an object in the bucket): the Worker reads its byte range itself. */
  input: BlobLocator;
  start: number;
  end: number;
  endpoint: string;
}

export interface ValidateTask extends ShardRef {
  type: "validate";
  /** Model ids this endpoint accepts. */
  models: string[];
}

export interface RunTask extends ShardRef {
  type: "run";
  outPath: string;
  errPath: string;
  /** Where the finished part files go (objects in the bucket), uploaded by the Worker before it reports "done"; null: they stay on this disk until finalize takes them. */
  partTargets: { out: PartTarget; err: PartTarget } | null;
  /** This run's number among the shard's claims (batch_shards.claims): names its checkpoints in the bucket. */
  claim: number;
  /** null: execute; else write every unfinished line as an error with this code. */
  stopCode: "batch_cancelled" | "batch_expired" | null;
  /** ms since epoch: no new attempt starts after it. */
  deadline: number;
  maxAttempts: number;
  retryBaseMs: number;
  /** Requests in flight at once for unlimited upstream models (a limited model's bound is its limit now: worker/runShard.ts). */
  concurrency: number;
  /** How a 2xx answer is written to the output file; absent: "endpoint". */
  answerShape?: AnswerShape;
}

/**
 * How a 2xx answer goes into a batch's output file: as the endpoint answered
 * it ("endpoint"), or translated to Anthropic's `message` ("message": a
 * message batch, docs/CONTRACT.md §22). A message batch's results are then
 * its output lines with only their envelope changed
 * (src/anthropic/batches/results.ts), and each message keeps its id however
 * often they are read. Its usage is Anthropic's: worker/partFiles.ts reads
 * it back after a restart.
 */
export type AnswerShape = "endpoint" | "message";

export type WorkerTask = ValidateTask | RunTask;

export interface ShardTotals {
  completed: number;
  failed: number;
  inputTokens: number;
  cachedTokens: number;
  outputTokens: number;
  reasoningTokens: number;
  costAmount: number;
}

export const zeroTotals = (): ShardTotals => ({ completed: 0, failed: 0, inputTokens: 0, cachedTokens: 0, outputTokens: 0, reasoningTokens: 0, costAmount: 0 });

export interface ValidateResult {
  lines: number;
  requests: number;
  /** Line numbers are local to the shard (1 = its first line). */
  errors: { line: number; code: string; param: string | null; message: string }[];
  firstModel: string | null;
}

export type FromWorker =
  | { type: "validated"; batchId: string; idx: number; result: ValidateResult; metrics?: WorkerMetricsDelta }
  /** `metrics`: what the Worker counted for /metrics since its last message. */
  | { type: "progress"; batchId: string; idx: number; totals: ShardTotals; metrics?: WorkerMetricsDelta }
  | { type: "done"; batchId: string; idx: number; totals: ShardTotals; metrics?: WorkerMetricsDelta }
  /** Stopped for a checkpoint (shutdown) or a yield before the shard finished. */
  | { type: "paused"; batchId: string; idx: number; totals: ShardTotals; metrics?: WorkerMetricsDelta }
  | { type: "failed"; task: "validate" | "run"; batchId: string; idx: number; error: string; metrics?: WorkerMetricsDelta }
  /**
   * Scheduler slots on limited models, gathered over one turn of the Worker's
   * event loop: `acquire` asks for slots (answered with "grants"), `release`
   * gives them back, `cancel` withdraws asks (the shard pauses or stops).
   * One message per turn, not three per request.
   */
  | { type: "slots"; acquire: [reqId: number, model: string, batchId: string][]; release: number[]; pump: string[]; cancel: number[] }
  /** Requests of this Worker made upstream `upstream` suspect (its index in the health state): probe it now. */
  | { type: "upstream_down"; upstream: number; error: string };

export type ToWorker =
  /** `slots`: the scheduler's shared slot cells; `held`: this Worker's own count of slots it took itself, per model (read after a crash). */
  /** `turns`: the pool's turns at the CPU, `turn`: this Worker's own cells for them (./turns.ts). */
  /** `thread`: the settings the Worker holds for itself (src/threadSettings.ts), from the main thread's environment. */
  | { type: "init"; models: PricedModel[]; slots: Int32Array; held: Int32Array; health: HealthMemory; turns: Int32Array; turn: Int32Array; thread: ThreadSettings; replicas: ReplicaState | null }
  /** The replica sets changed (docs/CONTRACT.md §21). */
  | { type: "replicas"; sets: Record<string, ReplicaView[]> }
  | WorkerTask
  /** Stop executing: drain the rest as errors with `code`. */
  | { type: "stop"; batchId: string; code: "batch_cancelled" | "batch_expired" }
  /** Shutdown: finish in-flight requests, flush, report "paused". */
  | { type: "checkpoint" }
  /** This shard only, if the Worker runs it: pause as at a checkpoint, so that a batch ahead in the order gets the Worker (runner/yields.ts). */
  | { type: "yield"; batchId: string; idx: number }
  /** Slots granted since the last "grants" message. */
  | { type: "grants"; reqIds: number[] };

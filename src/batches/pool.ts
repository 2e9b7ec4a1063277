// A fixed pool of batch Workers. Each runs at most one shard at a time, and
// at most one validation: a validation task goes to an idle Worker if there
// is one, else it rides along on a Worker that runs a shard. A shard mostly
// waits on its upstream, and a validation is one short pass over at most
// 4 MB that needs no slots and no checkpoints, so a new batch is checked
// within a tick however long the running shards are: 20–150 ms, where
// waiting for a Worker took as long as a shard has left, 16 s in
// test/batches-yield.test.ts (minutes at an engine's pace). Both go by
// turns at the CPU (./turns.ts) like any CPU work; a Worker that runs both
// shares its own turn between them. (A shard itself does not ride along: it
// yields its Worker instead, runner/yields.ts.)
import { SHARED_MODELS } from "../inference/admission/slotCells";
import { BATCH_WORKER } from "../workers";
import { workerThreadSettings } from "../config";
import type { FromWorker, PricedModel, ReplicaState, RunTask, ToWorker, ValidateTask, WorkerTask } from "./types";
import type { HealthMemory } from "../inference/upstream/health";
import { newTurnHolder, newTurns, reclaimTurn } from "./turns";
import { defaultBatchWorkers, usableCores } from "../defaults";

/**
 * How every batch Worker is created. Not `{ smol: true }` (JavaScriptCore's
 * small heap): it changed no Worker's memory (docs/benchmarks/history.md, 16
 * Workers: 651 MB peak against 674, the heap sampled in each 24.5 MB against
 * 24.6), since what a busy Worker holds is strings' and buffers' storage, not
 * cells; ./worker/garbage.ts and ./turns.ts bound that instead.
 */
export const BATCH_WORKER_OPTIONS: WorkerOptions = {};

interface Slot {
  worker: Worker;
  run: RunTask | null;
  validate: ValidateTask | null;
  /** Slots this Worker took itself, per model (shared memory: still readable after it died). */
  held: Int32Array;
  /** Whether it holds, or waits for, a turn at the CPU (shared memory: still readable after it died). */
  turn: Int32Array;
}

export class WorkerPool {
  private readonly slots: Slot[] = [];
  private terminating = false;
  /** How many Workers may do CPU work at once (./turns.ts): as many as the default Worker count for this machine's cores, fewer if the pool is smaller. */
  readonly turnCount: number;
  private readonly turns: Int32Array;

  constructor(
    size: number,
    private readonly models: () => PricedModel[],
    private readonly slotCells: Int32Array,
    private readonly health: HealthMemory,
    private readonly onMessage: (m: FromWorker, worker: Worker) => void,
    /** `tasks`: what it was running; `held`: the Worker's count of slots it took itself, per model (shared memory: still readable after it died). */
    private readonly onCrash: (tasks: WorkerTask[], error: string, worker: Worker, held: Int32Array) => void,
    turns = defaultBatchWorkers(usableCores()),
  ) {
    this.turnCount = Math.max(1, Math.min(size, turns));
    this.turns = newTurns(this.turnCount);
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new Worker(BATCH_WORKER, BATCH_WORKER_OPTIONS), run: null, validate: null, held: new Int32Array(new SharedArrayBuffer(4 * SHARED_MODELS)), turn: newTurnHolder() };
    slot.worker.onmessage = (e: MessageEvent<FromWorker>) => {
      const m = e.data;
      if (m.type === "validated" || (m.type === "failed" && m.task === "validate")) slot.validate = null;
      else if (m.type === "done" || m.type === "paused" || m.type === "failed") slot.run = null;
      this.onMessage(m, slot.worker);
    };
    const lost = (error: string) => {
      const i = this.slots.indexOf(slot);
      if (i === -1 || this.terminating) return; // already replaced, or being stopped
      const tasks = [slot.run, slot.validate].filter((t) => t !== null);
      slot.run = slot.validate = null;
      slot.worker.terminate();
      // Its turn at the CPU, if it held one or was counted as waiting; again
      // once it has stopped, in case it took one in its last moments.
      const reclaim = () => reclaimTurn(this.turns, slot.turn);
      reclaim();
      slot.worker.addEventListener("close", reclaim, { once: true });
      this.slots[i] = this.spawn();
      this.onCrash(tasks, error, slot.worker, slot.held);
    };
    slot.worker.onerror = (e) => lost(e.message);
    // A Worker can also end without an error event (process.exit in it).
    slot.worker.addEventListener("close", () => lost("the Worker exited"));
    this.init(slot);
    return slot;
  }

  /** The upstreams' replica sets (docs/CONTRACT.md §21), set by the runner: sent with every init, and to every Worker on a change (replicasChanged). */
  replicas: (() => ReplicaState) | null = null;

  private init(slot: Slot): void {
    slot.worker.postMessage({
      type: "init",
      models: this.models(),
      slots: this.slotCells,
      held: slot.held,
      health: this.health,
      turns: this.turns,
      turn: slot.turn,
      thread: workerThreadSettings(),
      replicas: this.replicas?.() ?? null,
    } satisfies ToWorker);
  }

  /** A replica was added, drained or removed: every Worker dispatches by the new set from its next line. */
  replicasChanged(): void {
    const state = this.replicas?.();
    if (state) this.broadcast({ type: "replicas", sets: state.sets });
  }

  /** Workers with no task: a shard may be claimed for each. */
  get idle(): number {
    return this.slots.filter((s) => s.run === null && s.validate === null).length;
  }

  get busy(): number {
    return this.slots.length - this.idle;
  }

  /** Hands a shard to an idle Worker; false if none is idle. */
  dispatch(task: RunTask): boolean {
    const slot = this.slots.find((s) => s.run === null && s.validate === null);
    if (!slot) return false;
    slot.run = task;
    this.send(slot, task);
    return true;
  }

  /** Whether a validation task would find a Worker now (dispatchValidation). */
  get canValidate(): boolean {
    return this.slots.some((s) => s.validate === null);
  }

  /** Hands a validation to an idle Worker, else to one that runs a shard and no validation; false if every Worker validates. */
  dispatchValidation(task: ValidateTask): boolean {
    const slot = this.slots.find((s) => s.run === null && s.validate === null) ?? this.slots.find((s) => s.validate === null);
    if (!slot) return false;
    slot.validate = task;
    this.send(slot, task);
    return true;
  }

  private send(slot: Slot, task: WorkerTask): void {
    // The registry changes (upstream models found after start): every task
    // goes with the models as they are now.
    this.init(slot);
    slot.worker.postMessage(task satisfies ToWorker);
  }

  /** Sends `msg` to the Worker running shard `idx` of `batchId`; false if none does. */
  postToShard(batchId: string, idx: number, msg: ToWorker): boolean {
    const slot = this.slots.find((s) => s.run?.batchId === batchId && s.run.idx === idx);
    slot?.worker.postMessage(msg);
    return slot !== undefined;
  }

  broadcast(msg: ToWorker): void {
    for (const s of this.slots) s.worker.postMessage(msg);
  }

  /** The Workers now in the pool, each with its count of slots it took itself. */
  members(): { worker: Worker; held: Int32Array }[] {
    return this.slots.map((s) => ({ worker: s.worker, held: s.held }));
  }

  /**
   * Stops every Worker and resolves once they have stopped: terminate()
   * returns while a Worker may still run for a few ms, and what it does
   * then (take or give back a slot in shared memory) must be over before
   * its slots are counted back.
   */
  terminate(): Promise<void> {
    this.terminating = true;
    return Promise.all(
      this.slots.map(
        (s) =>
          new Promise<void>((resolve) => {
            const done = setTimeout(resolve, 2000);
            s.worker.addEventListener("close", () => (clearTimeout(done), resolve()), { once: true });
            s.worker.terminate();
          }),
      ),
    ).then(() => {});
  }
}

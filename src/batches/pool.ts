// A fixed pool of batch Workers, each running one task at a time.
import { SHARED_MODELS } from "../inference/admission/scheduler";
import { BATCH_WORKER } from "../workers";
import type { FromWorker, PricedModel, ToWorker, WorkerTask } from "./types";
import type { HealthMemory } from "../inference/upstream/health";
import { defaultBatchWorkers, newTurnHolder, newTurns, reclaimTurn, usableCores } from "./turns";

/**
 * How every batch Worker is created. Not `{ smol: true }` (JavaScriptCore's
 * small heap): it changed no Worker's memory (bench/worker-memory.ts, 16
 * Workers: 651 MB peak against 674, the heap sampled in each 24.5 MB against
 * 24.6), since what a busy Worker holds is strings' and buffers' storage, not
 * cells; ./worker/garbage.ts and ./turns.ts bound that instead.
 */
export const BATCH_WORKER_OPTIONS: WorkerOptions = {};

interface Slot {
  worker: Worker;
  task: WorkerTask | null;
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
    /** `held`: the Worker's count of slots it took itself, per model (shared memory: still readable after it died). */
    private readonly onCrash: (task: WorkerTask | null, error: string, worker: Worker, held: Int32Array) => void,
    turns = defaultBatchWorkers(usableCores()),
  ) {
    this.turnCount = Math.max(1, Math.min(size, turns));
    this.turns = newTurns(this.turnCount);
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new Worker(BATCH_WORKER, BATCH_WORKER_OPTIONS), task: null, held: new Int32Array(new SharedArrayBuffer(4 * SHARED_MODELS)), turn: newTurnHolder() };
    slot.worker.onmessage = (e: MessageEvent<FromWorker>) => {
      const m = e.data;
      if (m.type === "validated" || m.type === "done" || m.type === "paused" || m.type === "failed") slot.task = null;
      this.onMessage(m, slot.worker);
    };
    const lost = (error: string) => {
      const i = this.slots.indexOf(slot);
      if (i === -1 || this.terminating) return; // already replaced, or being stopped
      const task = slot.task;
      slot.task = null;
      slot.worker.terminate();
      // Its turn at the CPU, if it held one or was counted as waiting; again
      // once it has stopped, in case it took one in its last moments.
      const reclaim = () => reclaimTurn(this.turns, slot.turn);
      reclaim();
      slot.worker.addEventListener("close", reclaim, { once: true });
      this.slots[i] = this.spawn();
      this.onCrash(task, error, slot.worker, slot.held);
    };
    slot.worker.onerror = (e) => lost(e.message);
    // A Worker can also end without an error event (process.exit in it).
    slot.worker.addEventListener("close", () => lost("the Worker exited"));
    this.init(slot);
    return slot;
  }

  private init(slot: Slot): void {
    slot.worker.postMessage({ type: "init", models: this.models(), slots: this.slotCells, held: slot.held, health: this.health, turns: this.turns, turn: slot.turn } satisfies ToWorker);
  }

  get idle(): number {
    return this.slots.filter((s) => s.task === null).length;
  }

  get busy(): number {
    return this.slots.length - this.idle;
  }

  /** Hands `task` to an idle worker; false if none is idle. */
  dispatch(task: WorkerTask): boolean {
    const slot = this.slots.find((s) => s.task === null);
    if (!slot) return false;
    slot.task = task;
    // The registry changes (upstream models found after start): every task
    // goes with the models as they are now.
    this.init(slot);
    slot.worker.postMessage(task satisfies ToWorker);
    return true;
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

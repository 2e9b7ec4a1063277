// A fixed pool of batch Workers, each running one task at a time.
import { BATCH_WORKER } from "../workers";
import type { FromWorker, PricedModel, ToWorker, WorkerTask } from "./types";

interface Slot {
  worker: Worker;
  task: WorkerTask | null;
  /** Slots this Worker took itself, per model (shared memory: still readable after it died). */
  held: Int32Array;
}

/** As many as the scheduler has shared models. */
const HELD_CELLS = 1024;

export class WorkerPool {
  private readonly slots: Slot[] = [];

  constructor(
    size: number,
    private readonly models: () => PricedModel[],
    private readonly slotCells: Int32Array,
    private readonly onMessage: (m: FromWorker, worker: Worker) => void,
    private readonly onCrash: (task: WorkerTask | null, error: string, worker: Worker) => void,
  ) {
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new Worker(BATCH_WORKER), task: null, held: new Int32Array(new SharedArrayBuffer(4 * HELD_CELLS)) };
    this.heldBy.set(slot.worker, slot.held);
    slot.worker.onmessage = (e: MessageEvent<FromWorker>) => {
      const m = e.data;
      if (m.type === "validated" || m.type === "done" || m.type === "paused" || m.type === "failed") slot.task = null;
      this.onMessage(m, slot.worker);
    };
    slot.worker.onerror = (e) => {
      const task = slot.task;
      slot.task = null;
      slot.worker.terminate();
      const i = this.slots.indexOf(slot);
      if (i !== -1) this.slots[i] = this.spawn();
      this.onCrash(task, e.message, slot.worker);
    };
    this.init(slot);
    return slot;
  }

  private readonly heldBy = new WeakMap<Worker, Int32Array>();

  private init(slot: Slot): void {
    slot.worker.postMessage({ type: "init", models: this.models(), slots: this.slotCells, held: slot.held } satisfies ToWorker);
  }

  /** The per-model counts of slots `worker` took itself (for giving them back when it died). */
  heldOf(worker: Worker): Int32Array | undefined {
    return this.heldBy.get(worker);
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

  terminate(): void {
    for (const s of this.slots) s.worker.terminate();
  }
}

// A fixed pool of batch Workers, each running one task at a time.
import { BATCH_WORKER } from "../workers";
import type { FromWorker, PricedModel, ToWorker, WorkerTask } from "./types";

interface Slot {
  worker: Worker;
  task: WorkerTask | null;
}

export class WorkerPool {
  private readonly slots: Slot[] = [];

  constructor(
    size: number,
    private readonly models: () => PricedModel[],
    private readonly onMessage: (m: FromWorker, worker: Worker) => void,
    private readonly onCrash: (task: WorkerTask | null, error: string, worker: Worker) => void,
  ) {
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new Worker(BATCH_WORKER), task: null };
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
    slot.worker.postMessage({ type: "init", models: this.models() } satisfies ToWorker);
    return slot;
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
    slot.worker.postMessage({ type: "init", models: this.models() } satisfies ToWorker);
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

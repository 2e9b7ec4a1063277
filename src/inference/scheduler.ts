// One scheduler per process decides who may use a model's capacity.
// Interactive requests go first; batch lines ("off-peak") get a slot only
// when no interactive request is waiting, so batches use what interactive
// traffic leaves free. A model without max_concurrency is unlimited and
// needs no slots. A full interactive queue answers 529 at once.
import { ApiError } from "../errors";
import type { ModelEntry } from "./registry";

interface Waiter {
  grant: () => void;
  cancelled: boolean;
}

class ModelLane {
  inFlight = 0;
  batchInFlight = 0;
  readonly interactive: Waiter[] = [];
  readonly batch: Waiter[] = [];
  constructor(
    readonly limit: number | null,
    readonly queueSize: number,
  ) {}

  get queued(): number {
    return this.interactive.length;
  }

  /** Hands free slots to waiters, interactive first. */
  pump(): void {
    while (this.limit === null || this.inFlight < this.limit) {
      const w = shiftLive(this.interactive) ?? shiftLive(this.batch);
      if (!w) return;
      this.inFlight++;
      w.grant();
    }
  }
}

function shiftLive(q: Waiter[]): Waiter | undefined {
  while (q.length) {
    const w = q.shift()!;
    if (!w.cancelled) return w;
  }
  return undefined;
}

export type Release = () => void;

export class Scheduler {
  private readonly lanes = new Map<string, ModelLane>();

  private lane(model: ModelEntry): ModelLane {
    let l = this.lanes.get(model.id);
    if (!l) {
      l = new ModelLane(model.maxConcurrency, model.queueSize);
      this.lanes.set(model.id, l);
    }
    return l;
  }

  /** For an interactive request: a slot now, a place in the queue, or 529. */
  async acquireInteractive(model: ModelEntry, signal?: AbortSignal): Promise<Release> {
    const lane = this.lane(model);
    if (lane.limit === null || (lane.inFlight < lane.limit && lane.interactive.length === 0)) {
      lane.inFlight++;
      return this.releaser(lane, false);
    }
    if (lane.interactive.length >= lane.queueSize) {
      throw new ApiError("overloaded", `Model ${model.id} is overloaded: its queue is full. Retry shortly.`, { headers: { "retry-after": "1" } });
    }
    await this.wait(lane, lane.interactive, signal);
    return this.releaser(lane, false);
  }

  /** For a batch line: waits (without bound) until interactive traffic leaves a slot. */
  async acquireBatch(model: ModelEntry, signal?: AbortSignal): Promise<Release> {
    const lane = this.lane(model);
    if (lane.limit === null || (lane.inFlight < lane.limit && lane.interactive.length === 0 && lane.batch.length === 0)) {
      lane.inFlight++;
      lane.batchInFlight++;
      return this.releaser(lane, true);
    }
    await this.wait(lane, lane.batch, signal);
    lane.batchInFlight++;
    return this.releaser(lane, true);
  }

  private wait(lane: ModelLane, queue: Waiter[], signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason ?? new Error("aborted"));
      let granted = false;
      const w: Waiter = {
        grant: () => {
          granted = true;
          resolve();
        },
        cancelled: false,
      };
      queue.push(w);
      signal?.addEventListener(
        "abort",
        () => {
          if (w.cancelled || granted) return;
          w.cancelled = true;
          // Leave the queue at once: a client that gave up used to keep its
          // place, so `queued` (GET /status) stayed up and the bounded queue
          // answered 529 although nobody was waiting.
          const i = queue.indexOf(w);
          if (i !== -1) queue.splice(i, 1);
          reject(signal.reason ?? new Error("aborted"));
        },
        { once: true },
      );
    });
  }

  private releaser(lane: ModelLane, batch: boolean): Release {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      lane.inFlight--;
      if (batch) lane.batchInFlight--;
      lane.pump();
    };
  }

  stats(modelId: string): { inFlight: number; queued: number; batchInFlight: number; batchQueued: number } {
    const l = this.lanes.get(modelId);
    return { inFlight: l?.inFlight ?? 0, queued: l?.queued ?? 0, batchInFlight: l?.batchInFlight ?? 0, batchQueued: l?.batch.length ?? 0 };
  }
}

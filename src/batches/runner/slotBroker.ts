// The main thread's side of scheduler slots for batch Workers. A batch line
// on a limited model needs a slot of the model's concurrency; the scheduler
// (inference/admission/scheduler.ts) owns them and serves interactive
// requests first, then batch lines in the batch order (scheduling/order.ts).
// A Worker takes a free slot itself, from shared memory, while nobody waits
// in the scheduler (batches/worker/slots.ts); otherwise it asks here, one
// message per turn of its event loop, and this broker waits in the
// scheduler on the line's behalf, with its batch's key, and sends the grant.
//
// It also keeps what each Worker holds, so that a Worker that dies or is
// stopped gives every slot back: those granted through here, and those it
// took itself (its shared `held` count).
import type { ModelRegistry } from "../../inference/registry";
import type { Release, Scheduler } from "../../inference/admission/scheduler";
import { CELLS } from "../../inference/admission/slotCells";
import type { BatchKey } from "../../scheduling/order";
import type { FromWorker, ToWorker } from "../types";

export class SlotBroker {
  /** Slots granted through here and held by Workers' requests, by worker then request id. */
  private readonly slots = new Map<Worker, Map<number, Release>>();
  /** Grants not yet sent, by worker: sent together at the end of the turn. */
  private readonly pendingGrants = new Map<Worker, number[]>();
  /** Asks waiting in the scheduler, by worker then request id, each with what withdraws it: a pause or stop there does. */
  private readonly asks = new Map<Worker, Map<number, () => void>>();
  /** Workers whose slots were given back: a late message from one must not take new ones. */
  private readonly released = new WeakSet<Worker>();

  constructor(
    private readonly scheduler: Scheduler,
    private readonly registry: ModelRegistry,
    /** The batch order's key of a batch running here (./peakCap.ts). */
    private readonly keyFor: (batchId: string) => BatchKey | undefined,
  ) {}

  /**
   * A Worker's "slots" message: asks, then releases, then hand-ons. Asks
   * first, so that they stand in line (in the batch order) when this turn's
   * releases free slots: a release hands its slot on at once, and read
   * first it would go to a waiter behind this batch while the ask for the
   * batch's next line, sent in the same turn, is still unread: a 1h batch
   * would let a 24h one take every other round of its slots
   * (test/batches-scheduling.test.ts: 5 of its lines in 12).
   */
  onMessage(m: Extract<FromWorker, { type: "slots" }>, worker: Worker): void {
    if (this.released.has(worker)) return;
    let held = this.slots.get(worker);
    if (!held) this.slots.set(worker, (held = new Map()));
    const mine = held;
    let asks = this.asks.get(worker);
    if (!asks && m.acquire.length > 0) this.asks.set(worker, (asks = new Map()));
    for (const [reqId, modelId, batchId] of m.acquire) {
      const model = this.registry.get(modelId);
      if (!model) continue;
      // Served in the batch order: the key of the batch this Worker runs.
      this.scheduler.acquireBatch(model, (withdraw) => asks!.set(reqId, withdraw), this.keyFor(batchId)).then(
        (release) => {
          asks!.delete(reqId);
          // The Worker died meanwhile (its slots were given back): give this one back too.
          if (this.slots.get(worker) !== mine) return release();
          mine.set(reqId, release);
          this.grantSoon(worker, reqId);
        },
        // Withdrawn: it left the queue, and no grant goes out.
        () => asks!.delete(reqId),
      );
    }
    // Withdrawn asks leave the queue; one granted already has its grant on the way, and the Worker gives it back.
    for (const reqId of m.cancel) asks?.get(reqId)?.();
    for (const reqId of m.release) {
      held.get(reqId)?.();
      held.delete(reqId);
    }
    // A slot the Worker freed itself goes to whoever is first in line, this turn's asks included.
    for (const model of m.pump) this.scheduler.pump(model);
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

  /** A Worker that died or was stopped gives back every slot it held; `took`: its count of slots it took itself, per model. */
  releaseAll(worker: Worker, took: Int32Array): void {
    this.released.add(worker);
    for (const withdraw of this.asks.get(worker)?.values() ?? []) withdraw();
    this.asks.delete(worker);
    for (const release of this.slots.get(worker)?.values() ?? []) release();
    this.slots.delete(worker);
    // And the slots it had taken itself, straight from shared memory.
    for (const m of this.registry.list()) {
      const base = this.scheduler.sharedBase(m);
      if (base < 0) continue;
      this.scheduler.giveBack(m.id, Atomics.exchange(took, base / CELLS, 0));
    }
  }
}

// A batch Worker: runs tasks for shards so that the per-line CPU work (parse,
// build, run a built-in model, serialize) stays off the HTTP thread. At most
// one shard runs here at a time, and beside it at most one validation
// (../pool.ts says why); the two are independent, and only the shard obeys
// stop, checkpoint and yield.
import { setPriority } from "node:os";
import type { FromWorker, PricedModel, ToWorker } from "../types";
import type { ShardControl } from "./execute";
import { runShard } from "./runShard";
import { validateShard } from "./validateShard";
import { cancelAsks, initSlots, onGrants, setSharedSlots } from "./slots";
import { initGate } from "./upstreamGate";
import { giveTurn, initTurns } from "./turns";
import { countStorageRetry, takeWorkerMetrics } from "../../metrics/worker";
import { setRetryCounter } from "../../storage/retry";
import { setThreadSettings } from "../../threadSettings";
import { setReplicas, updateReplicas } from "./replicas";

declare const self: Worker;

const WORKER_NICE = 10;

// This thread runs at a lower CPU priority than the HTTP thread (nice 10;
// on Linux the nice value is per thread, so only this Worker's thread
// changes). With as many busy Workers as cores at its own priority, the
// HTTP thread's late ticks during a batch are waits for a core, not work:
// 15–105 ms in its run queue (/proc/thread-self/schedstat) for ~1 ms of
// CPU, and every API call and interactive chat waits with it (bench/stall.ts). A niced Worker
// yields the core when the HTTP thread wakes, and loses nothing while the
// HTTP thread is idle. It cannot help against other processes on a busy
// machine (docs/benchmarks/history.md "Stall").
try {
  setPriority(WORKER_NICE);
} catch {}

let models = new Map<string, PricedModel>();
let current: { batchId: string; idx: number; control: ShardControl } | null = null;
let checkpointing = false;
const post = (m: FromWorker) => self.postMessage(m);
initSlots(post);
// Bucket calls this Worker tries again are counted with its other metrics (sent with its messages).
setRetryCounter(countStorageRetry);

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const msg = event.data;
  switch (msg.type) {
    case "init":
      setThreadSettings(msg.thread);
      models = new Map(msg.models.map((m) => [m.id, m]));
      setSharedSlots(msg.slots, msg.held, (model) => models.get(model)?.sharedBase ?? -1);
      initGate(msg.health, post);
      initTurns(msg.turns, msg.turn);
      if (msg.replicas) setReplicas(msg.replicas.cells, msg.replicas.sets, msg.replicas.times);
      return;
    case "replicas":
      updateReplicas(msg.sets);
      return;
    case "stop":
      if (current && current.batchId === msg.batchId) {
        current.control.stopCode ??= msg.code;
        cancelAsks();
      }
      return;
    case "grants":
      onGrants(msg.reqIds);
      return;
    case "checkpoint":
      checkpointing = true;
      if (current) {
        current.control.pausing = true;
        cancelAsks();
      }
      return;
    case "yield":
      // Paused like at a checkpoint, but only this shard: the next task runs as usual.
      if (current && current.batchId === msg.batchId && current.idx === msg.idx) {
        current.control.pausing = true;
        cancelAsks();
      }
      return;
    case "validate":
      // Whatever happened, this Worker's turn at the CPU goes back with its task (./turns.ts).
      validateShard(msg)
        .finally(giveTurn)
        .then(
          (result) => post({ type: "validated", batchId: msg.batchId, idx: msg.idx, result, metrics: takeWorkerMetrics() }),
          (e) => post({ type: "failed", task: "validate", batchId: msg.batchId, idx: msg.idx, error: String(e?.stack ?? e), metrics: takeWorkerMetrics() }),
        );
      return;
    case "run": {
      const control: ShardControl = { stopCode: msg.stopCode, pausing: checkpointing };
      current = { batchId: msg.batchId, idx: msg.idx, control };
      runShard(msg, models, control, post)
        .catch((e) => post({ type: "failed", task: "run", batchId: msg.batchId, idx: msg.idx, error: String(e?.stack ?? e), metrics: takeWorkerMetrics() }))
        .finally(() => {
          giveTurn();
          if (current?.control === control) current = null;
        });
      return;
    }
  }
};

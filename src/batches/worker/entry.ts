// A batch Worker: runs validate/run tasks for shards, one at a time, so the
// per-line CPU work (parse, build, run a built-in model, serialize) stays off
// the HTTP thread.
import type { FromWorker, PricedModel, ToWorker } from "../types";
import type { ShardControl } from "./execute";
import { runShard } from "./runShard";
import { validateShard } from "./validateShard";
import { initSlots, onGrants, setSharedSlots } from "./slots";
import { initGate } from "./upstreamGate";

declare const self: Worker;

let models = new Map<string, PricedModel>();
let current: { batchId: string; control: ShardControl } | null = null;
let checkpointing = false;
const post = (m: FromWorker) => self.postMessage(m);
initSlots(post);

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const msg = event.data;
  switch (msg.type) {
    case "init":
      models = new Map(msg.models.map((m) => [m.id, m]));
      setSharedSlots(msg.slots, msg.held, (model) => models.get(model)?.sharedBase ?? -1);
      initGate(msg.health, post);
      return;
    case "stop":
      if (current && current.batchId === msg.batchId) current.control.stopCode ??= msg.code;
      return;
    case "grants":
      onGrants(msg.reqIds);
      return;
    case "checkpoint":
      checkpointing = true;
      if (current) current.control.pausing = true;
      return;
    case "validate":
      validateShard(msg).then(
        (result) => post({ type: "validated", batchId: msg.batchId, idx: msg.idx, result }),
        (e) => post({ type: "failed", task: "validate", batchId: msg.batchId, idx: msg.idx, error: String(e?.stack ?? e) }),
      );
      return;
    case "run": {
      const control: ShardControl = { stopCode: msg.stopCode, pausing: checkpointing };
      current = { batchId: msg.batchId, control };
      runShard(msg, models, control, post)
        .catch((e) => post({ type: "failed", task: "run", batchId: msg.batchId, idx: msg.idx, error: String(e?.stack ?? e) }))
        .finally(() => {
          if (current?.control === control) current = null;
        });
      return;
    }
  }
};

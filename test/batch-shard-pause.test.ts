// A shard pausing (a yield, a shutdown) while its lines wait for scheduler
// slots (src/batches/worker/slots.ts cancelAsks): it lets go of its Worker at
// once, asks for no slot after the cancel (not even for lines that were
// waiting for room under the shard's bound), and a grant that crossed the
// cancel is given back even when it arrives after the Worker's next task
// began. Run on this thread with a built-in model that needs a slot.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newTurnHolder, newTurns } from "../src/batches/turns";
import type { FromWorker, PricedModel, RunTask } from "../src/batches/types";
import { runShard } from "../src/batches/worker/runShard";
import { cancelAsks, initSlots, onGrants, setSharedSlots, setSlotBatch } from "../src/batches/worker/slots";
import { initTurns } from "../src/batches/worker/turns";
import { initGate } from "../src/batches/worker/upstreamGate";
import { newHealthMemory } from "../src/inference/upstream/health";
import { eventually } from "./helpers/inference";

const dir = mkdtempSync(join(tmpdir(), "offpeak-shard-pause-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("paused with lines queued for slots: the shard ends at once, asks nothing more, and a late crossed grant goes back", async () => {
  const input = join(dir, "in.jsonl");
  writeFileSync(input, [1, 2, 3, 4, 5, 6].map((i) => JSON.stringify({ custom_id: `l${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "bi", messages: [{ role: "user", content: "x" }] } })).join("\n") + "\n");
  const slots: Extract<FromWorker, { type: "slots" }>[] = [];
  const reports: string[] = [];
  const post = (m: FromWorker) => {
    if (m.type === "slots") slots.push(m);
    else if (m.type !== "progress") reports.push(m.type);
  };
  // No shared cells: every slot is asked of the main thread (here: never granted).
  initSlots(post);
  setSharedSlots(new Int32Array(0), new Int32Array(0), () => -1);
  initTurns(newTurns(1), newTurnHolder());
  initGate(newHealthMemory(), post);
  try {
    const model = { id: "bi", kind: "builtin", latencyMs: 50, limited: true, sharedBase: -1, upstreamIdx: -1, inputPerMillion: 0, outputPerMillion: 0, tokensPerSecond: 0 } as unknown as PricedModel;
    const task = { type: "run", batchId: "b1", idx: 0, input: { path: input }, start: 0, end: 1 << 20, endpoint: "/v1/chat/completions", outPath: join(dir, "o"), errPath: join(dir, "e"), partTargets: null, claim: 1, stopCode: null, deadline: Date.now() + 1e6, maxAttempts: 3, retryBaseMs: 100, concurrency: 2 } as unknown as RunTask;
    const control = { stopCode: null, pausing: false };
    const run = runShard(task, new Map([["bi", model]]), control as never, post);
    // Two lines ask (the shard's bound is 2); the others wait for room under it.
    const askedNow = () => slots.flatMap((m) => m.acquire.map((a) => a[0]));
    await eventually(() => askedNow().length === 2, "two asks");
    await Bun.sleep(20);
    const asked = askedNow();
    expect(asked).toHaveLength(2);
    const before = slots.length;
    control.pausing = true;
    cancelAsks();
    expect(await Promise.race([run.then(() => "ended"), Bun.sleep(5000).then(() => "still running")])).toBe("ended");
    expect(reports).toContain("paused");
    await eventually(() => slots.flatMap((m) => m.cancel).length === 2, "the cancel sent");
    // The lines that were waiting for room asked for nothing once the shard was pausing.
    expect(slots.slice(before).flatMap((m) => m.acquire)).toEqual([]);
    expect(slots.flatMap((m) => m.cancel).sort()).toEqual([...asked].sort());
    // The next task began before the main thread read the cancel; a grant it had made comes now.
    setSlotBatch("b2");
    onGrants([asked[0]!]);
    await eventually(() => slots.flatMap((m) => m.release).includes(asked[0]!), "the crossed grant given back");
  } finally {
    initSlots(() => {});
    setSharedSlots(new Int32Array(0), new Int32Array(0), () => -1);
  }
});

// Batch Workers and memory (docs/CONTRACT.md §20). The default Worker count is one per
// usable core, at most 8. CPU work goes by turns (src/batches/turns.ts): at
// most that many Workers parse lines at once, a Worker that waits for a turn
// gets it when one is given back (not before), a Worker that hands its turn
// to a waiting one collects its heap first, and a dead Worker's turn goes
// back to the pool. A batch run by more Workers than turns completes with
// every line once.
import { afterAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { resolveConfig } from "../src/config";
import { FREE, HOLDING, WAITERS, WAITING, newTurnHolder, newTurns, reclaimTurn } from "../src/batches/turns";
import { MAX_DEFAULT_BATCH_WORKERS, defaultBatchWorkers, usableCores } from "../src/defaults";
import { COLLECT_EVERY_CHARS, collect, collections, worked } from "../src/batches/worker/garbage";
import { chatReq, createBatch, expectExactlyOnce, pollUntil, readResults, waitBatch } from "./helpers/batches";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

describe("the default number of batch Workers", () => {
  test("one per usable core, at most 8, at least 1", () => {
    expect(MAX_DEFAULT_BATCH_WORKERS).toBe(8);
    expect([1, 2, 3, 4, 8, 9, 16, 64].map(defaultBatchWorkers)).toEqual([1, 2, 3, 4, 8, 8, 8, 8]);
    expect(defaultBatchWorkers(0)).toBe(1);
    expect(defaultBatchWorkers(Number.NaN)).toBe(1);
  });

  test("the config takes it when nothing sets a count; a count set wins", () => {
    const base = ["--data-dir", "/tmp/offpeak-turns-config"];
    expect(resolveConfig(base, {}).batches.workers).toBe(defaultBatchWorkers(usableCores()));
    expect(resolveConfig(base, { OFFPEAK_BATCH_WORKERS: "16" }).batches.workers).toBe(16);
  });
});

/** A Worker of test/helpers/turnWorker.ts, with a queue of its answers. */
function turnWorker(turns: Int32Array) {
  const w = new Worker(new URL("./helpers/turnWorker.ts", import.meta.url));
  const holder = newTurnHolder();
  const answers: { cmd: string; holds?: boolean; collections?: number; waits?: boolean }[] = [];
  let wake: (() => void) | null = null;
  w.onmessage = (e) => {
    answers.push(e.data);
    wake?.();
  };
  const next = async (cmd: string) => {
    for (;;) {
      const i = answers.findIndex((a) => a.cmd === cmd);
      if (i !== -1) return answers.splice(i, 1)[0]!;
      await new Promise<void>((r) => (wake = r));
    }
  };
  const send = (cmd: string, extra: Record<string, unknown> = {}) => w.postMessage({ cmd, ...extra });
  send("init", { turns, turn: holder });
  return { w, holder, next, send, answers };
}

describe("turns at the CPU", () => {
  const live: Worker[] = [];
  afterAll(() => live.forEach((w) => w.terminate()));

  test("a Worker waits while every turn is taken, gets one when it is given back, and the giver collects its heap first", async () => {
    const turns = newTurns(1);
    const a = turnWorker(turns);
    const b = turnWorker(turns);
    live.push(a.w, b.w);
    await Promise.all([a.next("init-done"), b.next("init-done")]);

    a.send("take");
    expect((await a.next("taking")).waits).toBe(false);
    expect((await a.next("take-done")).holds).toBe(true);
    expect(Atomics.load(turns, FREE)).toBe(0);
    expect(Atomics.load(a.holder, HOLDING)).toBe(1);

    b.send("take");
    expect((await b.next("taking")).waits).toBe(true);
    await pollUntil(async () => Atomics.load(turns, WAITERS), (n) => n === 1, 5000, 5, "b counted as waiting");
    expect(Atomics.load(b.holder, WAITING)).toBe(1);

    // Work since a's last collection, over the hand-over minimum: a collects before giving its turn to b.
    a.send("work", { chars: 1 << 20 });
    const before = (await a.next("work-done")).collections!;
    // b still waits: nothing was given back.
    expect(b.answers.some((x) => x.cmd === "take-done")).toBe(false);

    a.send("give");
    const gave = await a.next("give-done");
    expect(gave.holds).toBe(false);
    expect(gave.collections).toBe(before + 1);
    expect((await b.next("take-done")).holds).toBe(true);
    expect(Atomics.load(turns, WAITERS)).toBe(0);
    expect(Atomics.load(b.holder, WAITING)).toBe(0);
    expect(Atomics.load(turns, FREE)).toBe(0);

    // Nobody waits now: b gives its turn back without collecting.
    b.send("work", { chars: 1 << 20 });
    const bBefore = (await b.next("work-done")).collections!;
    b.send("give");
    expect((await b.next("give-done")).collections).toBe(bBefore);
    expect(Atomics.load(turns, FREE)).toBe(1);
  });

  test("a dead Worker's turn goes back to the pool, once", async () => {
    const turns = newTurns(1);
    const a = turnWorker(turns);
    const b = turnWorker(turns);
    live.push(a.w, b.w);
    await Promise.all([a.next("init-done"), b.next("init-done")]);
    a.send("take");
    await a.next("take-done");
    b.send("take");
    await b.next("taking");
    await pollUntil(async () => Atomics.load(turns, WAITERS), (n) => n === 1, 5000, 5, "b waiting");

    a.w.terminate();
    reclaimTurn(turns, a.holder);
    reclaimTurn(turns, a.holder); // a second time (the pool does, once the Worker has stopped): nothing more
    expect((await b.next("take-done")).holds).toBe(true);
    expect(Atomics.load(turns, FREE)).toBe(0);

    // A Worker that died while it waited is no longer counted as waiting.
    const c = turnWorker(turns);
    live.push(c.w);
    await c.next("init-done");
    c.send("take");
    await c.next("taking");
    await pollUntil(async () => Atomics.load(turns, WAITERS), (n) => n === 1, 5000, 5, "c waiting");
    c.w.terminate();
    reclaimTurn(turns, c.holder);
    expect(Atomics.load(turns, WAITERS)).toBe(0);
    expect(Atomics.load(turns, FREE)).toBe(0);
  });

  test("a Worker collects its heap after every COLLECT_EVERY_CHARS characters of work", () => {
    // The budget starts empty (other files in this process may have run shards on this thread).
    collect();
    const before = collections().collections;
    worked(COLLECT_EVERY_CHARS - 1);
    expect(collections().collections).toBe(before);
    worked(1);
    expect(collections().collections).toBe(before + 1);
  });
});

describe("a batch run by more Workers than turns", () => {
  let t: TestServer;
  afterAll(async () => {
    await t?.stop();
  });

  test("completes, every line once", async () => {
    // 16 Workers: more than the turns on any machine (at most 8). ≈2.3 kB a
    // line: ≈14 MB, 4 shards, validated and run by Workers taking turns.
    t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "16" } });
    const client: OpenAI = t.sdk();
    const pad = "pad ".repeat(560);
    const ids = Array.from({ length: 6000 }, (_, i) => `turns-${i}`);
    const { batch } = await createBatch(client, ids.map((id) => chatReq(id, `${id} ${pad}`)));
    const done = await waitBatch(client, batch.id, undefined, 120_000);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: ids.length, completed: ids.length, failed: 0 });
    expectExactlyOnce(ids, await readResults(client, done.output_file_id), await readResults(client, done.error_file_id));
  }, SCENARIO_MS);
});

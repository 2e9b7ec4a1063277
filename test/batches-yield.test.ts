// Urgent work reaches Workers that are mid-shard (docs/CONTRACT.md §18): a 20-line batch
// of project B must not stay `validating`, nor wait to run, while project A's
// long shards hold every batch Worker.
//
// - A new batch's validation starts at once, even when every Worker runs a
//   long shard of an earlier batch: it rides along on a Worker whose shard
//   waits on its upstream (src/batches/pool.ts).
// - A shard that has run a while yields its Worker (checkpoint, back to
//   pending) when a batch ahead of it in the order waits for one: an earlier
//   deadline, or a project holding two Workers fewer (src/scheduling/order.ts
//   yieldsFor, src/batches/runner/yields.ts).
//
// With 2 Workers, and with more Workers than turns at the CPU
// (src/batches/turns.ts). Runs on SQLite, and on Postgres with
// OFFPEAK_TEST_DATABASE=postgres.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { and, eq } from "drizzle-orm";
import { yieldsFor, type YieldBatch } from "../src/scheduling/order";
import type { WorkerPool } from "../src/batches/pool";
import { LiveShards } from "../src/batches/runner/live";
import type { Stops } from "../src/batches/runner/stops";
import { Yields } from "../src/batches/runner/yields";
import type { TickQueries } from "../src/batches/tickQueries";
import type { AppContext } from "../src/context";
import { defaultBatchWorkers, usableCores } from "../src/defaults";
import { chatReq, createBatch, pollUntil, readResults, waitBatch } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const dir = mkdtempSync(join(tmpdir(), "offpeak-yield-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// ── the decision, as a pure function ──────────────────────────────────────

describe("yieldsFor", () => {
  const b = (id: string, project: string, bucket: number, running: number, pending: number, seq = 0): YieldBatch => ({ id, project, bucket, running, pending, seq });
  const shard = (batchId: string, idx: number, ranMs: number) => ({ batchId, idx, ranMs });
  const MIN = 2000;

  test("an earlier deadline takes a Worker from a later one, once its shard has run long enough", () => {
    const batches = [b("late", "A", 30, 2, 5), b("urgent", "A", 10, 0, 1)];
    expect(yieldsFor(batches, [shard("late", 0, 5000), shard("late", 1, 500)], MIN)).toEqual([{ batchId: "late", idx: 0 }]);
    // Neither has run long enough: nothing yields yet.
    expect(yieldsFor(batches, [shard("late", 0, 1500), shard("late", 1, 500)], MIN)).toEqual([]);
  });

  test("at equal deadlines, a project holding two Workers more gives one to a project holding none; never more than the other has pending", () => {
    const batches = [b("a", "A", 5, 3, 10), b("b", "B", 5, 0, 1)];
    const running = [shard("a", 0, 9000), shard("a", 1, 9000), shard("a", 2, 9000)];
    expect(yieldsFor(batches, running, MIN)).toEqual([{ batchId: "a", idx: 0 }]);
    // With more of B pending, until the two are within one Worker of each other.
    expect(yieldsFor([b("a", "A", 5, 3, 10), b("b", "B", 5, 0, 5)], running, MIN)).toHaveLength(1);
    expect(yieldsFor([b("a", "A", 5, 4, 10), b("b", "B", 5, 0, 5)], [...running, shard("a", 3, 9000)], MIN)).toHaveLength(2);
  });

  test("balanced within one Worker: no yield, so no back and forth", () => {
    expect(yieldsFor([b("a", "A", 5, 2, 10), b("b", "B", 5, 1, 10)], [shard("a", 0, 9000), shard("a", 1, 9000)], MIN)).toEqual([]);
    // One Worker: a project holding it keeps it (a yield would only hand it back and forth).
    expect(yieldsFor([b("a", "A", 5, 1, 10), b("b", "B", 5, 0, 10)], [shard("a", 0, 9000)], MIN)).toEqual([]);
    // A later deadline never takes a Worker from an earlier one.
    expect(yieldsFor([b("a", "A", 5, 2, 10), b("b", "B", 9, 0, 10)], [shard("a", 0, 9000), shard("a", 1, 9000)], MIN)).toEqual([]);
  });

  test("within a project, its batches in turn; the shard furthest behind in the order yields first", () => {
    const batches = [b("a1", "A", 5, 2, 4, 1), b("a2", "A", 5, 0, 4, 2), b("x", "X", 20, 1, 0, 3)];
    const running = [shard("a1", 0, 9000), shard("a1", 1, 9000), shard("x", 0, 9000)];
    // a2 waits with an earlier deadline than x: x's shard goes first; then a1 holds 2 against a2's 1, balanced.
    expect(yieldsFor(batches, running, MIN)).toEqual([{ batchId: "x", idx: 0 }]);
  });
});

// ── two nodes reading the same rows ───────────────────────────────────────

describe("Yields on a cluster", () => {
  /** One node's yield check, as the runner wires it, over rows every node reads alike. */
  function node(index: number, count: number, rows: () => unknown[], shards: [string, number][]) {
    const asked: string[] = [];
    const ctx = { config: { batches: { hourSeconds: 3600 } }, members: { place: () => ({ index, count }) }, log: { info: () => {} } } as unknown as AppContext;
    const q = { orderCounts: { execute: async () => rows() } } as unknown as TickQueries;
    const live = new LiveShards();
    for (const [batchId, idx] of shards) live.add(batchId, idx, 0);
    const pool = { idle: 0, postToShard: (batchId: string, idx: number) => (asked.push(`${batchId}/${idx}`), true) } as unknown as WorkerPool;
    const yields = new Yields(ctx, q, live, { stopping: () => false } as unknown as Stops);
    return { asked, live, check: (now: number) => yields.check(now, pool) };
  }

  test("one waiting shard: one node yields for it, not each; the odd ones go to the nodes in turn", async () => {
    const hour = Math.floor(Date.now() / 1000 / 3600) * 3600;
    // "late" runs a shard on each node; "urgent" (an earlier deadline) waits with one shard.
    const rows = () => [
      { id: "late", project: "A", expiresAt: hour + 30 * 3600, seq: 1, running: 2, pending: 5 },
      { id: "urgent", project: "A", expiresAt: hour + 3600, seq: 2, running: 0, pending: 1 },
    ];
    const yieldsAt = async (now: number) => {
      const nodes = [node(0, 2, rows, [["late", 0]]), node(1, 2, rows, [["late", 1]])];
      for (const n of nodes) await n.check(now);
      return nodes.map((n) => n.asked.length);
    };
    const seen: number[][] = [];
    for (let t = 0; t < 4; t++) seen.push(await yieldsAt(1_000_000 + t * 3000));
    // One yield in all each time (each node alone would yield: the test below), by each node in some turn.
    for (const s of seen) expect(s[0]! + s[1]!).toBe(1);
    expect(new Set(seen.map((s) => s.indexOf(1)))).toEqual(new Set([0, 1]));
    // Alone (a single node, or a node that ignored the others): it yields for the waiting shard.
    const alone = node(0, 1, rows, [["late", 0]]);
    await alone.check(1_000_000);
    expect(alone.asked).toEqual(["late/0"]);
  });
});

// ── on a server ───────────────────────────────────────────────────────────

/** Counts each batch's lines at the fake upstream (lines are named "<tag> <n>"), and when each tag first arrived. */
function tracker(latencyMs: number) {
  const first = new Map<string, number>();
  const seen = new Map<string, number>();
  return {
    first,
    seen,
    latency: (content: string) => {
      const tag = content.split(" ")[0]!;
      if (!first.has(tag)) first.set(tag, Date.now());
      seen.set(tag, (seen.get(tag) ?? 0) + 1);
      return latencyMs;
    },
  };
}

// 64 KB lines: 64 to a 4 MB shard.
const PAD = "x".repeat(64 * 1024);
/** The upstream answers in 500 ms and takes 4 at once: 8 lines a second for every batch together. */
const LATENCY_MS = 500;

const workerCounts = [2, defaultBatchWorkers(usableCores()) + 2];
for (const workers of workerCounts)
  describe(`${workers} Workers${workers > defaultBatchWorkers(usableCores()) ? " (more than the turns at the CPU)" : ""}`, () => {
    let t: TestServer;
    let fake: FakeUpstream;
    const track = tracker(LATENCY_MS);
    beforeAll(async () => {
      fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: track.latency });
      const cfg = join(dir, `w${workers}.json`);
      writeFileSync(cfg, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 4 }] }));
      t = await startTestServer({ argv: ["--config", cfg], env: { OFFPEAK_BATCH_WORKERS: String(workers) } });
    });
    afterAll(async () => {
      await t?.stop();
      await fake?.stop();
    });

    test("while every Worker runs a long shard of project A, project B's new batch is validated at once, and runs and finishes while A still runs", async () => {
      const a = t.sdk(await t.createKey({ name: "a", project: "proj-a" }));
      const b = t.sdk(await t.createKey({ name: "b", project: "proj-b" }));
      // One shard more than there are Workers; each shard takes 64 / (8 / workers) s = 8 × workers s.
      const big = await createBatch(a, Array.from({ length: 64 * (workers + 1) }, (_, i) => chatReq(`a-${i}`, `A ${i} ${PAD}`, { model: "fake-chat" })));
      const { batchShards } = t.server.ctx.db.t;
      const running = async () => (await t.server.ctx.db.select({ idx: batchShards.idx }).from(batchShards).where(eq(batchShards.status, "running"))).length;
      // How many of A's shards have ended: each takes 64 lines at the upstream's pace (8 × workers s at
      // least, however fast the machine), so "before any shard of A ended" is what "at once" means here,
      // and it does not depend on how fast this machine is.
      const aShardsDone = async () =>
        (await t.server.ctx.db.select({ idx: batchShards.idx }).from(batchShards).where(and(eq(batchShards.batchId, big.batch.id), eq(batchShards.status, "done")))).length;
      await pollUntil(running, (n) => n === workers, 20_000, 50, "every Worker running a shard of A");
      const small = await createBatch(b, Array.from({ length: 20 }, (_, i) => chatReq(`b-${i}`, `B ${i}`, { model: "fake-chat" })));
      // Out of `validating` while every shard of A still runs (before: only after a shard of A ended).
      const validated = await pollUntil(async () => (await b.batches.retrieve(small.batch.id)).status, (s) => s !== "validating", 20_000, 25, "B validated");
      const doneAtValidation = await aShardsDone();
      // A shard of A yields its Worker (it has run for a while): B runs and ends before any shard of A could end.
      const done = await waitBatch(b, small.batch.id, undefined, 30_000);
      const doneAtB = await aShardsDone();
      const aNow = await a.batches.retrieve(big.batch.id);
      // Seen once on a loaded Postgres run: B completed with 0 lines completed. Say what it holds if so.
      if (done.request_counts?.completed !== 20)
        console.error("B's record:", JSON.stringify(done), "its error file:", done.error_file_id ? (await readResults(b, done.error_file_id)).slice(0, 3) : null);
      expect({ validated, doneAtValidation }).toEqual({ validated: "in_progress", doneAtValidation: 0 });
      expect({ b: done.status, completed: done.request_counts?.completed, a: aNow.status, aShardsDoneWhenBEnded: doneAtB }).toEqual({
        b: "completed",
        completed: 20,
        a: "in_progress",
        aShardsDoneWhenBEnded: 0,
      });
      // A goes on from where its yielded shard stopped: every line once.
      expect(aNow.request_counts!.completed).toBeLessThan(64 * (workers + 1));
      await a.batches.cancel(big.batch.id);
      const ended = await waitBatch(a, big.batch.id, undefined, 30_000);
      expect((ended.request_counts?.completed ?? 0) + (ended.request_counts?.failed ?? 0)).toBe(64 * (workers + 1));
      expect(Math.max(...[...fake.counts.values()])).toBe(1);
    }, SCENARIO_MS);
  });

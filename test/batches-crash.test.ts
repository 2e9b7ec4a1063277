// Batches survive their server (docs/CONTRACT.md §5, §9): a child-process server running
// a batch against a fake upstream is killed with SIGKILL (or stopped with
// SIGTERM) mid-batch and restarted on the same data dir; the batch must then
// complete with every custom_id exactly once, and the fake upstream's
// counters show that nothing was sent twice unless it was in flight at the
// crash (and nothing at all after a clean SIGTERM).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, expectExactlyOnce, pollUntil, readResults, waitBatch, type ResultLine } from "./helpers/batches";
import { ChildServer, killChildren } from "./helpers/child";
import { inShare, plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { testServeArgs } from "./helpers/server";
import { needs, SCENARIO_MS } from "./helpers/wait";

const WORKERS = 2;
/** The upstream's max_concurrency: no more requests than this are in flight at once. */
const CONCURRENCY = 16;
const PRICE_IN = 1000;
const PRICE_OUT = 2000;
const N = 2000;

const tmp = mkdtempSync(join(tmpdir(), "offpeak-crash-"));
let fake: FakeUpstream;
let configPath: string;

beforeAll(async () => {
  // 40 ms per request and 16 at a time: ≈400 requests per second, so 2000 lines take ≈5 s.
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 40 });
  configPath = join(tmp, "config.json");
  writeFileSync(
    configPath,
    JSON.stringify({
      // The server's model id differs from the upstream's (model_map), and has prices.
      upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["mapped-chat"], model_map: { "mapped-chat": "fake-chat" }, max_concurrency: CONCURRENCY }],
      models: { "mapped-chat": { pricing: { input_per_million: PRICE_IN, output_per_million: PRICE_OUT } } },
    }),
  );
});

afterAll(async () => {
  await killChildren();
  await fake?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** A server on `dataDir` (SQLite and files there, or as the environment says: testServeArgs; the same on a restart). */
const start = async (dataDir: string) => {
  const where = await testServeArgs(dataDir);
  return ChildServer.start({
    dataDir,
    args: ["--config", configPath, ...where.args],
    env: { OFFPEAK_LOG_LEVEL: "warn", OFFPEAK_BATCH_WORKERS: String(WORKERS), OFFPEAK_BATCH_RETRY_BASE_MS: "5", ...where.env },
  });
};

function lines(prefix: string): { ids: string[]; contents: Map<string, string>; text: string[] } {
  // ≈2.3 kB a line, so the ≈4.6 MB file is cut into two shards, run by two Workers.
  const pad = "pad ".repeat(560);
  const ids: string[] = [];
  const contents = new Map<string, string>();
  const text: string[] = [];
  for (let i = 0; i < N; i++) {
    const id = `${prefix}-${i}`;
    const content = `${prefix} request ${i} ${pad}`;
    ids.push(id);
    contents.set(id, content);
    text.push(chatReq(id, content, { model: "mapped-chat" }));
  }
  return { ids, contents, text };
}

const sum = (out: ResultLine[], f: (u: any) => number) => out.reduce((a, l) => a + f(l.response!.body.usage), 0);

function expectUsageAndCost(b: any, out: ResultLine[]) {
  const input = sum(out, (u) => u.prompt_tokens);
  const output = sum(out, (u) => u.completion_tokens);
  expect(b.usage.input_tokens).toBe(input);
  expect(b.usage.output_tokens).toBe(output);
  expect(b.usage.total_tokens).toBe(input + output);
  expect(b.cost.amount).toBeCloseTo(((input * PRICE_IN + output * PRICE_OUT) / 1e6) * 0.5, 4);
}

describe("SIGKILL mid-batch, then restart", () => {
  const dataDir = join(tmp, "kill");
  const { ids, contents, text } = lines("kill");
  let batchId: string;
  let killedAt = { completed: 0, inFlight: 0 };
  let done: any;
  let out: ResultLine[] = [];
  let err: ResultLine[] = [];

  test("the killed server's batch completes after a restart on the same data dir", async () => {
    fake.reset();
    fake.plan = null;
    const first = await start(dataDir);
    const { batch } = await createBatch(first.client, text);
    batchId = batch.id;
    const partway = await pollUntil(
      () => first.client.batches.retrieve(batchId),
      (b) => b.request_counts!.completed >= 300,
      30_000,
      25,
      "the batch to be partway",
    );
    expect(partway.status).toBe("in_progress");
    expect(await first.stop("SIGKILL")).not.toBeNull();
    killedAt = { completed: partway.request_counts!.completed, inFlight: fake.stats.inFlight };
    expect(killedAt.completed).toBeLessThan(N); // really partway

    const second = await start(dataDir);
    done = await waitBatch(second.client, batchId, undefined, 40_000);
    expect(done.status).toBe("completed");
    out = await readResults(second.client, done.output_file_id);
    err = await readResults(second.client, done.error_file_id);
    expect(await second.stop("SIGTERM")).toBe(0);
  }, SCENARIO_MS);

  test("every custom_id exactly once across output and error files; completed + failed = total", () => {
    needs(done, "the killed server's batch completes after a restart on the same data dir");
    expectExactlyOnce(ids, out, err);
    expect(done.request_counts).toEqual({ total: N, completed: out.length, failed: err.length });
    expect(err).toEqual([]);
    for (const l of out) {
      expect(l.response!.status_code).toBe(200);
      if (l.response!.body.choices[0].message.content !== contents.get(l.custom_id)) throw new Error(`wrong body for ${l.custom_id}`);
    }
  });

  test("no request reached the upstream more than twice, and only the ones in flight at the kill twice", () => {
    needs(done, "the killed server's batch completes after a restart on the same data dir");
    let twice = 0;
    for (const [id, c] of contents) {
      const sent = fake.counts.get(c) ?? 0;
      if (sent < 1 || sent > 2) throw new Error(`${id} was sent upstream ${sent} times`);
      if (sent === 2) twice++;
    }
    // At most max_concurrency requests are in flight at once; a few more may
    // have been answered but not yet written when the process died.
    expect(twice).toBeLessThanOrEqual(Math.max(killedAt.inFlight, CONCURRENCY) + 8);
    expect(twice).toBeLessThanOrEqual(64 * WORKERS);
    expect(fake.stats.requests).toBe(N + twice);
  });

  test("usage and cost after the restart still equal the sums over the output lines", () => {
    needs(done, "the killed server's batch completes after a restart on the same data dir");
    expectUsageAndCost(done, out);
  });
});

describe("SIGTERM mid-batch, then restart", () => {
  const dataDir = join(tmp, "term");
  const { ids, contents, text } = lines("term");
  // Half the requests fail once with a 500 and then succeed: some are
  // between attempts when the server is told to stop.
  const flaky = inShare(0.5);
  let exitCode: number | null = null;
  let beforeStop = 0;
  const afterRestart: { status: string; done: number }[] = [];
  let done: any;
  let out: ResultLine[] = [];
  let err: ResultLine[] = [];

  test("SIGTERM → exit 0 within 10 s; a restart completes the batch", async () => {
    fake.reset();
    fake.plan = plans.failFirst(1, { status: 500 }, flaky);
    const first = await start(dataDir);
    const { batch } = await createBatch(first.client, text);
    const partway = await pollUntil(
      () => first.client.batches.retrieve(batch.id),
      (b) => b.request_counts!.completed >= 300,
      30_000,
      25,
      "the batch to be partway",
    );
    expect(partway.status).toBe("in_progress");
    beforeStop = partway.request_counts!.completed + partway.request_counts!.failed;
    exitCode = await first.stop("SIGTERM", 10_000);
    expect({ exitCode, stderr: exitCode === 0 ? "" : first.stderr }).toEqual({ exitCode: 0, stderr: "" });

    const second = await start(dataDir);
    done = await pollUntil(
      async () => {
        const b = await second.client.batches.retrieve(batch.id);
        afterRestart.push({ status: b.status, done: b.request_counts!.completed + b.request_counts!.failed });
        return b;
      },
      (b) => ["completed", "failed", "expired", "cancelled"].includes(b.status),
      40_000,
      20,
      "the batch to finish after the restart",
    );
    expect(done.status).toBe("completed");
    out = await readResults(second.client, done.output_file_id);
    err = await readResults(second.client, done.error_file_id);
    expect(await second.stop("SIGTERM")).toBe(0);
  }, SCENARIO_MS);

  test("request_counts never go back after the restart", () => {
    needs(done, "SIGTERM → exit 0 within 10 s; a restart completes the batch");
    expect(afterRestart.length).toBeGreaterThan(0);
    const lowest = Math.min(...afterRestart.map((c) => c.done));
    expect({ beforeStop, lowestAfterRestart: lowest }).toEqual({ beforeStop, lowestAfterRestart: Math.max(lowest, beforeStop) });
  });

  test("every custom_id exactly once; completed + failed = total", () => {
    needs(done, "SIGTERM → exit 0 within 10 s; a restart completes the batch");
    expectExactlyOnce(ids, out, err);
    expect(done.request_counts).toEqual({ total: N, completed: out.length, failed: err.length });
  });

  test("a clean stop sends nothing twice: each request reached the upstream only as often as its failure plan needs", () => {
    needs(done, "SIGTERM → exit 0 within 10 s; a restart completes the batch");
    const over: string[] = [];
    for (const [id, c] of contents) {
      const sent = fake.counts.get(c) ?? 0;
      if (sent > (flaky(c) ? 2 : 1)) over.push(`${id}: ${sent}`);
      if (sent < 1) over.push(`${id}: never sent`);
    }
    expect(over).toEqual([]);
  });

  test("requests that failed once (retryable 500) in flight at SIGTERM are retried, not reported as failed", () => {
    needs(done, "SIGTERM → exit 0 within 10 s; a restart completes the batch");
    expect(err.map((l) => `${l.custom_id}: ${l.response?.status_code ?? l.error?.code}`)).toEqual([]);
    expect(out.length).toBe(N);
  });

  test("usage and cost after the restart still equal the sums over the output lines", () => {
    needs(done, "SIGTERM → exit 0 within 10 s; a restart completes the batch");
    expectUsageAndCost(done, out);
  });
});

// docs/CONTRACT.md §11 with §5's restart rule: a server killed (SIGKILL) while its
// upstream is down, and started again on the same data dir while the engine
// is still away, finishes the batch once the engine returns: completed,
// failed 0, every custom_id exactly once.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createBatch, expectExactlyOnce, pollUntil, readResults, sleep, waitBatch, type ResultLine } from "./helpers/batches";
import { ChildServer, killChildren } from "./helpers/child";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { readStatus, upstreamLines, writeUpstreamConfig, type StatusView } from "./helpers/outage";
import { testServeArgs } from "./helpers/server";
import { needs, SCENARIO_MS } from "./helpers/wait";

const NAME = "outage-k";
const N = 1500;

const tmp = mkdtempSync(join(tmpdir(), "offpeak-outage-crash-"));
let fake: FakeUpstream;
let cfg: { path: string; cleanup(): void };

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 5 });
  cfg = writeUpstreamConfig("offpeak-outage-k-", { name: NAME, base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 8 });
});
afterAll(async () => {
  await killChildren();
  await fake?.stop();
  cfg?.cleanup();
  rmSync(tmp, { recursive: true, force: true });
});

/** A server on `dataDir` (SQLite and files there, or as the environment says: testServeArgs; the same on a restart). */
const start = async (dataDir: string) => {
  const where = await testServeArgs(dataDir);
  return ChildServer.start({
    dataDir,
    args: ["--config", cfg.path, ...where.args],
    env: { OFFPEAK_LOG_LEVEL: "error", OFFPEAK_BATCH_WORKERS: "2", OFFPEAK_BATCH_RETRY_BASE_MS: "10", OFFPEAK_BATCH_MAX_ATTEMPTS: "4", ...where.env },
  });
};

const { ids, contents, text } = upstreamLines("crash", N);
let killed: any;
let restartedWhileDown: StatusView | undefined;
let done: any;
let out: ResultLine[] = [];
let err: ResultLine[] = [];

test("SIGKILL during an outage, restart while the engine is still away, engine back: the batch completes", async () => {
  const dataDir = join(tmp, "data");
  const first = await start(dataDir);
  const { batch } = await createBatch(first.client, text);
  await pollUntil(() => first.client.batches.retrieve(batch.id), (b) => b.request_counts!.completed >= 300, 30_000, 25, "the batch to be partway");
  await fake.down();
  // Let the server notice the outage and its lines start waiting.
  await pollUntil(() => readStatus((p) => first.api(p), NAME), (s) => s.upstream?.healthy === false, 5000, 50, "the upstream to be reported down").catch(() => null);
  await sleep(500);
  killed = await first.client.batches.retrieve(batch.id);
  first.proc.kill("SIGKILL");
  await first.proc.exited;

  const second = await start(dataDir);
  try {
    // The restarted server finds the engine still away (a wait for its health check, not for a time).
    restartedWhileDown = await pollUntil(() => readStatus((p) => second.api(p), NAME), (s) => s.upstream?.healthy === false, 20_000, 50, "the restarted server to find the upstream down");
    const midway = await second.client.batches.retrieve(batch.id);
    expect({ status: midway.status, failed: midway.request_counts!.failed }).toEqual({ status: "in_progress", failed: 0 });
    await fake.up();
    done = await waitBatch(second.client, batch.id, undefined, 40_000);
    out = await readResults(second.client, done.output_file_id);
    err = await readResults(second.client, done.error_file_id);
  } finally {
    second.proc.kill("SIGTERM");
    await second.proc.exited;
  }
  expect(done.status).toBe("completed");
  expect(err.map((l) => `${l.custom_id}: ${l.response?.status_code ?? l.error?.code}`).slice(0, 10)).toEqual([]);
  expect(done.request_counts).toEqual({ total: N, completed: N, failed: 0 });
}, SCENARIO_MS);

test("at the kill the batch was partway, with no failed line", () => {
  needs(killed, "SIGKILL during an outage, restart while the engine is still away, engine back: the batch completes");
  expect({ status: killed.status, failed: killed.request_counts.failed, partway: killed.request_counts.completed < N }).toEqual({ status: "in_progress", failed: 0, partway: true });
});

test("every custom_id exactly once, each with its own answer; every line reached the engine", () => {
  needs(done, "SIGKILL during an outage, restart while the engine is still away, engine back: the batch completes");
  expectExactlyOnce(ids, out, err);
  for (const l of out) if (l.response!.body.choices[0].message.content !== contents.get(l.custom_id)) throw new Error(`wrong body for ${l.custom_id}`);
  const never = [...contents].filter(([, c]) => !fake.counts.has(c)).map(([id]) => id);
  expect(never).toEqual([]);
});

test("the restarted server reported the upstream down while the engine was away", () => {
  expect(restartedWhileDown?.upstream).toEqual({ name: NAME, healthy: false, since: expect.any(Number), last_error: expect.any(String) });
  expect(restartedWhileDown!.status).toBe("degraded");
});

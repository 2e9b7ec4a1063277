// Off-peak hours end to end (docs/CONTRACT.md §18): while a batch with a window of 24h
// or more is held to the peak share, its record says so (status_details
// peak_hours, through the API); and on a cluster the nodes share one cap:
// two nodes on one Postgres and one bucket keep a capped batch's lines in
// flight within ceil(share × max_concurrency) together, each within its
// part (the cap is a share of the cluster's limit, split over the live
// nodes like the limit: src/nodes/membership.ts, scheduler.ts; 3 nodes'
// parts in test/batches-scheduling.test.ts).
//
// The single node runs on SQLite, or on Postgres with
// OFFPEAK_TEST_DATABASE=postgres; the cluster always on Postgres.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import { chatReq, createBatch, pollUntil, sleep, waitBatch } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startPostgres } from "./helpers/postgres";
import { s3Storage } from "./helpers/s3";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const dir = mkdtempSync(join(tmpdir(), "offpeak-peak-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Lines in flight at the fake upstream, by tag (lines are named "<tag> <n>"), and the most seen. */
function tracker(latencyMs: number) {
  const inFlight = new Map<string, number>();
  const max = new Map<string, number>();
  return {
    max,
    latency: (content: string) => {
      const tag = content.split(" ")[0]!;
      const n = (inFlight.get(tag) ?? 0) + 1;
      inFlight.set(tag, n);
      max.set(tag, Math.max(max.get(tag) ?? 0, n));
      setTimeout(() => inFlight.set(tag, inFlight.get(tag)! - 1), latencyMs);
      return latencyMs;
    },
  };
}

/** A config with one upstream of max_concurrency 8, in peak hours all week, batches of 24h or more held to a quarter. */
function peakConfig(name: string, fake: FakeUpstream): string {
  const cfg = join(dir, `${name}.json`);
  writeFileSync(
    cfg,
    JSON.stringify({
      upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 8 }],
      batches: { peak_hours: [{ days: "mon-sun", from: "00:00", to: "24:00", tz: "UTC" }], peak_share: 0.25 },
    }),
  );
  return cfg;
}

describe("one node", () => {
  let t: TestServer;
  let fake: FakeUpstream;
  const track = tracker(200);
  beforeAll(async () => {
    fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: track.latency });
    t = await startTestServer({ argv: ["--config", peakConfig("one", fake)], env: { OFFPEAK_BATCH_WORKERS: "1" } });
  });
  afterAll(async () => {
    await t?.stop();
    await fake?.stop();
  });

  test("a capped batch's record says peak_hours (code, message, since) while it is held to its share", async () => {
    const client = t.sdk();
    const { batch } = await createBatch(client, Array.from({ length: 200 }, (_, i) => chatReq(`c-${i}`, `capped ${i}`, { model: "fake-chat" })), { window: "24h" });
    const seen = await pollUntil(
      async () => (await t.api(`/batches/${batch.id}`)).json() as Promise<{ status: string; status_details: { code: string; message: string; since: number } | null }>,
      (b) => b.status_details?.code === "peak_hours",
      10_000,
      100,
      "status_details peak_hours",
    );
    expect(seen.status).toBe("in_progress");
    expect(seen.status_details!.message).toContain("25%");
    expect(seen.status_details!.since).toBeGreaterThan(Date.now() / 1000 - 60);
    // Held to ceil(0.25 × 8) = 2 although the model is otherwise idle: two at the engine (the
    // record can say peak_hours before their requests arrive there), and never more over a few rounds.
    await pollUntil(async () => track.max.get("capped") ?? 0, (n) => n >= 2, 10_000, 20, "two capped lines at the engine");
    await sleep(600);
    expect(track.max.get("capped")).toBe(2);
    await client.batches.cancel(batch.id);
    const done = await waitBatch(client, batch.id, undefined, 15_000);
    expect({ status: done.status, details: (done as { status_details?: unknown }).status_details ?? null }).toEqual({ status: "cancelled", details: null });
  }, SCENARIO_MS);
});

describe("two nodes on one Postgres and one bucket", () => {
  const nodes: TestServer[] = [];
  let fake: FakeUpstream;
  const track = tracker(200);
  beforeAll(async () => {
    fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: track.latency });
    const cfg = peakConfig("cluster", fake);
    const dbUrl = await (await startPostgres()).createDatabase();
    const storage = await s3Storage();
    for (const i of [0, 1])
      nodes.push(
        await startTestServer({
          argv: ["--config", cfg, "--database-url", dbUrl, "--storage-url", storage.url],
          env: { ...storage.env, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_NODE_NAME: `peak-node-${i}` },
        }),
      );
    // Each node has seen the other and taken its part of max_concurrency 8.
    const model = nodes[0]!.server.ctx.registry.get("fake-chat")!;
    await pollUntil(async () => nodes.map((n) => n.server.ctx.scheduler.limitOf(model)), (l) => l.every((x) => x === 4), 15_000, 100, "each node's part of the limit");
  }, SCENARIO_MS);
  afterAll(async () => {
    for (const n of nodes) await n.stop();
    await fake?.stop();
  });

  test("a capped batch run by both nodes holds at most ceil(0.25 × 8) = 2 lines in flight in all, and its record says peak_hours on either node", async () => {
    const [a, b] = nodes as [TestServer, TestServer];
    const client = a.sdk();
    // 64 KB lines: 64 to a 4 MB shard, 5 shards: one for each node's Worker, and some waiting (with 3, the
    // second node was left without a shard for 20 s in a few full runs).
    const pad = "x".repeat(64 * 1024);
    const { batch } = await createBatch(client, Array.from({ length: 300 }, (_, i) => chatReq(`k-${i}`, `capped ${i} ${pad}`, { model: "fake-chat" })), { window: "24h" });
    // Both nodes run a shard of it.
    const { batchShards } = a.server.ctx.db.t;
    const owners = async () => new Set((await a.server.ctx.db.select({ owner: batchShards.leaseOwner }).from(batchShards).where(eq(batchShards.status, "running"))).map((r) => r.owner)).size;
    await pollUntil(owners, (n) => n === 2, 20_000, 50, "a shard running on each node");
    await sleep(3000);
    expect(track.max.get("capped")).toBe(2);
    // Each node holds its own cap of one: the two together reach two (not one node alone).
    const details = await pollUntil(
      async () => ((await b.api(`/batches/${batch.id}`)).json() as Promise<{ status_details: { code: string } | null }>),
      (x) => x.status_details?.code === "peak_hours",
      10_000,
      100,
      "status_details peak_hours on the other node",
    );
    expect(details.status_details!.code).toBe("peak_hours");
    await client.batches.cancel(batch.id);
    await waitBatch(client, batch.id, undefined, 30_000);
  }, SCENARIO_MS);
});

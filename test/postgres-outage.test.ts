// Postgres goes away and comes back (docs/CONTRACT.md §17): a restart mid-batch, and a
// node started before its database. A Postgres of this file's own (never
// the shared test server: it is halted mid-test) and a node in a child
// process running a batch against a fake upstream that counts each line's
// requests.
//
// While Postgres is down the node stays up, a call that needs the database
// answers 503 database_unavailable with retry-after within a few seconds
// (not a 500, not a hang), and the Workers go on answering lines; the shards
// that end meanwhile are recorded when it is back (they were lost before,
// and the batch stayed stuck short of its total for good). The batch then
// ends exact, each line sent upstream once.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatReq, createBatch, expectExactlyOnce, pollUntil, readResults, sleep, waitBatch, type ResultLine } from "./helpers/batches";
import { ChildServer, killChildren } from "./helpers/child";
import { startDedicatedPostgres, type RestartablePostgres } from "./helpers/postgres";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { s3Storage } from "./helpers/s3";
import { SQL } from "bun";
import { DrizzleQueryError } from "drizzle-orm";
import { databaseUnavailable, DatabaseUnavailable } from "../src/db/unavailable";
import { needs, PATIENCE, SCENARIO_MS, waitFor } from "./helpers/wait";

const N = 4000;
const WORKERS = 4;
/** 40 ms a request, 32 at a time: ≈800 lines a second, so the batch takes ≈5 s. */
const CONCURRENCY = 32;
const LATENCY_MS = 40;
/**
 * The outage lasts at least this long, and until the upstream has seen every
 * line (so every shard ends while Postgres is down) — or until no new line
 * reached it for STALL_MS (the Workers stopped: the test then fails, saying
 * so), however slow the machine.
 */
const MIN_OUTAGE_MS = 5000;
const STALL_MS = 15_000 * PATIENCE;
/** What "never a hang" means for a call during the outage. */
const ANSWER_WITHIN_MS = 3000;

const tmp = mkdtempSync(join(tmpdir(), "offpeak-pg-outage-"));
let pg: RestartablePostgres;
let dbUrl: string;
let fake: FakeUpstream;
let configPath: string;

beforeAll(async () => {
  pg = await startDedicatedPostgres();
  dbUrl = await pg.createDatabase();
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: LATENCY_MS });
  configPath = join(tmp, "config.json");
  writeFileSync(configPath, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: CONCURRENCY }] }));
}, SCENARIO_MS);

afterAll(async () => {
  await killChildren();
  await fake?.stop();
  await pg?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const start = (env: Record<string, string> = {}, startMs?: number) =>
  ChildServer.start({
    dataDir: join(tmp, "node"),
    args: ["--config", configPath, "--database-url", dbUrl],
    env: { OFFPEAK_LOG_LEVEL: "info", OFFPEAK_BATCH_WORKERS: String(WORKERS), ...env },
    startMs,
  });

function lines(): { ids: string[]; contents: Map<string, string>; text: string[] } {
  // ≈3.8 kB a line: the ≈15 MB file is cut into 4 shards (4 MB each), one per Worker.
  const pad = "pad ".repeat(900);
  const ids: string[] = [];
  const contents = new Map<string, string>();
  const text: string[] = [];
  for (let i = 0; i < N; i++) {
    const id = `line-${i}`;
    const content = `outage request ${i} ${pad}`;
    ids.push(id);
    contents.set(id, content);
    text.push(chatReq(id, content, { model: "fake-chat" }));
  }
  return { ids, contents, text };
}

interface Probe {
  status: number;
  ms: number;
  code: string | null;
  retryAfter: string | null;
}

describe("which errors say the database is unavailable (src/db/unavailable.ts)", () => {
  const caught = (p: Promise<unknown>) => p.then(() => null, (e: unknown) => e);
  const wrapped = (e: unknown) => new DrizzleQueryError("select 1", [], e as Error);

  test("a refused connection, and a session ended by the server (57P01), as Bun's client reports them and under Drizzle's wrapper", async () => {
    const closed = new SQL({ url: pg.url().replace(`:${pg.port}/`, ":1/"), max: 1, connectionTimeout: 2 });
    const refused = await caught(closed`select 1`);
    await closed.close().catch(() => {});
    const sql = new SQL({ url: dbUrl, max: 2 });
    try {
      const sleeping = caught(sql`select pg_sleep(10)`);
      await sleep(200);
      // The session that sleeps is ended by the server, as a fast shutdown ends every session.
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where query = 'select pg_sleep(10)' and pid <> pg_backend_pid()`;
      const terminated = await sleeping;
      const syntax = await caught(sql`select frobnicate`);
      expect((terminated as { errno?: string }).errno).toBe("57P01");
      for (const e of [refused, terminated, wrapped(refused), wrapped(terminated)]) expect(databaseUnavailable(e)).toBeInstanceOf(DatabaseUnavailable);
      expect(databaseUnavailable(syntax)).toBeNull();
      expect(databaseUnavailable(wrapped(syntax))).toBeNull();
    } finally {
      await sql.close();
    }
  });

  test("connection exceptions (08xxx), starting up (57P03), socket errors; not errors about the query", () => {
    const server = (errno: string) => Object.assign(new Error("x"), { code: "ERR_POSTGRES_SERVER_ERROR", errno });
    for (const e of [server("08006"), server("08001"), server("57P03"), server("57P01"), Object.assign(new Error("x"), { code: "ECONNRESET" }), Object.assign(new Error("x"), { code: "ERR_POSTGRES_CONNECTION_CLOSED" })])
      expect(databaseUnavailable(wrapped(e))).toBeInstanceOf(DatabaseUnavailable);
    for (const e of [server("23505"), server("42601"), server("40001"), new Error("boom"), null, "ECONNRESET"]) expect(databaseUnavailable(e)).toBeNull();
  });
});

describe("Postgres restarts mid-batch", () => {
  const { ids, contents, text } = lines();
  let node: ChildServer;
  let batchId = "";
  let atStop = { completed: 0, inFlight: 0, requests: 0 };
  let atResume = { requests: 0, outageMs: 0 };
  const probes: Probe[] = [];
  let done: any;
  let out: ResultLine[] = [];
  let err: ResultLine[] = [];

  test("the node stays up, answers 503 database_unavailable meanwhile, and the batch completes after", async () => {
    node = await start();
    const { batch } = await createBatch(node.client, text);
    batchId = batch.id;
    const partway = await pollUntil(
      () => node.client.batches.retrieve(batchId),
      (b) => b.request_counts!.completed >= 600,
      30_000,
      20,
      "the batch to be partway",
    );
    expect(partway.status).toBe("in_progress");

    await pg.halt();
    const haltedAt = Date.now();
    atStop = { completed: partway.request_counts!.completed, inFlight: fake.stats.inFlight, requests: fake.stats.requests };
    // Calls meanwhile: each answered, and soon.
    let seen = fake.stats.requests;
    let movedAt = haltedAt;
    while (Date.now() - haltedAt < MIN_OUTAGE_MS || (fake.stats.requests < N && Date.now() - movedAt < STALL_MS)) {
      if (fake.stats.requests !== seen) [seen, movedAt] = [fake.stats.requests, Date.now()];
      const t0 = Date.now();
      const res = await node.api(`/batches/${batchId}`, { signal: AbortSignal.timeout(10_000) });
      const body = (await res.json().catch(() => null)) as { error?: { code?: string } } | null;
      probes.push({ status: res.status, ms: Date.now() - t0, code: body?.error?.code ?? null, retryAfter: res.headers.get("retry-after") });
      expect(node.proc.exitCode).toBeNull();
      await sleep(250);
    }
    atResume = { requests: fake.stats.requests, outageMs: Date.now() - haltedAt };
    await pg.resume();

    done = await waitBatch(node.client, batchId, undefined, 30_000);
    expect(done.status).toBe("completed");
    out = await readResults(node.client, done.output_file_id);
    err = await readResults(node.client, done.error_file_id);
    expect(node.proc.exitCode).toBeNull();
    if (process.env.OFFPEAK_TEST_VERBOSE)
      console.error({ atStop, atResume, probes: probes.length, maxProbeMs: Math.max(...probes.map((p) => p.ms)), resent: fake.stats.requests - N }, node.stderr.split("\n").filter((l) => !l.includes('"request"')).join("\n"));
  }, SCENARIO_MS);

  test("every call during the outage answered 503 database_unavailable with retry-after, within a few seconds", () => {
    expect(probes.length).toBeGreaterThanOrEqual(5);
    for (const p of probes) {
      expect(p).toMatchObject({ status: 503, code: "database_unavailable" });
      expect(Number(p.retryAfter)).toBeGreaterThan(0);
      expect(p.ms).toBeLessThan(ANSWER_WITHIN_MS);
    }
  });

  test("the Workers went on during the outage: the batch's shards ended while Postgres was down", () => {
    needs(done, "the node stays up, answers 503 database_unavailable meanwhile, and the batch completes after");
    expect(atStop.completed).toBeLessThan(N / 2);
    // Every line had its answer before Postgres came back: what the shards ended with was recorded after.
    expect(atResume.requests).toBe(N);
  });

  test("every custom_id exactly once, with its own answer; counts exact", () => {
    needs(done, "the node stays up, answers 503 database_unavailable meanwhile, and the batch completes after");
    expectExactlyOnce(ids, out, err);
    expect(err).toEqual([]);
    expect(done.request_counts).toEqual({ total: N, completed: N, failed: 0 });
    for (const l of out) if (l.response!.body.choices[0].message.content !== contents.get(l.custom_id)) throw new Error(`wrong body for ${l.custom_id}`);
  });

  test("no line was sent upstream twice", () => {
    needs(done, "the node stays up, answers 503 database_unavailable meanwhile, and the batch completes after");
    const twice = [...contents.values()].filter((c) => (fake.counts.get(c) ?? 0) !== 1).length;
    expect(twice).toBe(0);
    expect(fake.stats.requests).toBe(N);
  });

  test("the node said so in its log, without a stack", () => {
    expect(node.stderr).toContain("database unavailable");
    expect(node.stderr).not.toContain("unhandled error");
    expect(node.stderr).not.toContain("batch runner tick failed");
  });

  test("it stops cleanly after", async () => {
    expect(await node.stop("SIGTERM")).toBe(0);
  });
});

describe("two nodes, Postgres away longer than their lease", () => {
  // Each node runs one shard, under a 2 s lease, through a 5 s outage: when
  // it is back every lease has lapsed, and the node that ticks first must not
  // take over the other's shard, which is still running (leases lapse by the
  // time the database was there to renew them in).
  const LEASE_MS = 2000;
  const M = 2000;
  const pad = "pad ".repeat(900);
  const contents = Array.from({ length: M }, (_, i) => `two-node request ${i} ${pad}`);

  test("both stay up, nothing is taken over, the batch ends exact and no line is sent twice", async () => {
    const url = await pg.createDatabase();
    const storage = await s3Storage();
    const config = join(tmp, "config-8.json");
    // 8 at a time for the cluster (4 a node), 40 ms each: each node's shard of 1,000 lines takes ≈10 s.
    writeFileSync(config, JSON.stringify({ upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 8 }] }));
    const nodes = await Promise.all(
      [0, 1].map((i) =>
        ChildServer.start({
          dataDir: join(tmp, `two-${i}`),
          args: ["--config", config, "--database-url", url, "--storage-url", storage.url],
          env: { ...storage.env, OFFPEAK_LOG_LEVEL: "info", OFFPEAK_NODE_NAME: `node-${i}`, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_LEASE_MS: String(LEASE_MS) },
          startMs: 30_000,
        }),
      ),
    );
    fake.reset();
    const { batch } = await createBatch(nodes[0]!.client, contents.map((c, i) => chatReq(`two-${i}`, c, { model: "fake-chat" })));
    // Both nodes hold a shard.
    await pollUntil(
      async () => ((await (await nodes[0]!.api("/status")).json()) as { nodes: { shards: number }[] }).nodes,
      (ns) => ns.length === 2 && ns.every((n) => n.shards === 1),
      20_000,
      50,
      "each node to run a shard",
    );
    await pollUntil(() => nodes[0]!.client.batches.retrieve(batch.id), (b) => b.request_counts!.completed >= 150, 20_000, 25, "the batch to be partway");
    await pg.halt();
    await sleep(2.5 * LEASE_MS);
    for (const n of nodes) expect(n.proc.exitCode).toBeNull();
    expect(fake.stats.requests).toBeLessThan(M); // the shards still run when it is back
    await pg.resume();

    const done = await waitBatch(nodes[1]!.client, batch.id, undefined, 40_000);
    expect(done.status).toBe("completed");
    const out = await readResults(nodes[1]!.client, done.output_file_id);
    expectExactlyOnce(contents.map((_, i) => `two-${i}`), out, []);
    expect(done.request_counts).toEqual({ total: M, completed: M, failed: 0 });
    const twice = contents.filter((c) => (fake.counts.get(c) ?? 0) !== 1).length;
    if (process.env.OFFPEAK_TEST_VERBOSE) console.error({ twoNodeResent: fake.stats.requests - M, twice });
    expect(twice).toBe(0);
    expect(fake.stats.requests).toBe(M);
    for (const n of nodes) {
      expect(n.proc.exitCode).toBeNull();
      expect(await n.stop("SIGTERM")).toBe(0);
    }
  }, SCENARIO_MS);
});

describe("Postgres down when a node starts", () => {
  test("the node waits for it, says so, and comes up once it starts", async () => {
    await pg.halt();
    const node = ChildServer.launch({
      dataDir: join(tmp, "node"),
      args: ["--config", configPath, "--database-url", dbUrl],
      env: { OFFPEAK_LOG_LEVEL: "info", OFFPEAK_BATCH_WORKERS: String(WORKERS) },
    });
    // Down until the node says it waits (however long its start takes), and a little longer.
    await waitFor(() => node.stderr.includes("waiting for the database") || node.proc.exitCode !== null, "the node to say it waits for the database");
    await sleep(1000);
    expect({ listening: node.listening, exited: node.proc.exitCode }).toEqual({ listening: false, exited: null });
    await pg.resume();
    await node.ready();
    // It answers from the database, as any node does.
    const res = await node.api("/batches?limit=1");
    expect(res.status).toBe(200);
    expect(await node.stop("SIGTERM")).toBe(0);
  }, SCENARIO_MS);

  test("past database.start_wait_s it exits with a clear message", async () => {
    await pg.halt();
    try {
      const t0 = Date.now();
      const err = await start({ OFFPEAK_DATABASE_START_WAIT_S: "1" }, 60_000).then(
        () => null,
        (e: Error) => e,
      );
      expect(err?.message).toContain("server exited with 1");
      expect(err?.message).toContain("could not reach the database");
      expect(err?.message).toContain("within 1 s");
      expect(err?.message).not.toMatch(/\n\s+at /); // no stack
      // It gave up after its 1 s, not after the default wait (300 s): a bound far from both, so that
      // a slow machine's start-up time does not decide the test.
      expect(Date.now() - t0).toBeLessThan(60_000);
    } finally {
      await pg.resume();
    }
  }, SCENARIO_MS);
});

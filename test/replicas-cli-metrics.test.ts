// The replicas of an upstream (docs/CONTRACT.md §21) as /metrics and the CLI
// show them: the same numbers as GET /upstreams. A real server with an
// upstream of two replicas, each a fake engine on loopback
// (test/helpers/fakeUpstream.ts); the CLI is the real entry point `bun
// src/main.ts`, run as a child process, as test/cli-client.test.ts runs it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { configWriter } from "./helpers/inference";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { parseMetrics, type Samples } from "./helpers/outage";
import { startTestServer, type TestServer } from "./helpers/server";
import { cleanEnv } from "./helpers/env";
import { SCENARIO_MS, pollUntil, waitFor } from "./helpers/wait";
import { Registry } from "../src/metrics/registry";

const MAIN = join(import.meta.dir, "..", "src/main.ts");
const MODEL = "twin-model";
/** A long system prompt per k: distinct prefixes, which the dispatch spreads over the replicas. */
const chat = (k: number, question: string) => ({
  model: MODEL,
  messages: [
    { role: "system", content: `You are assistant number ${k}. ` + `Rule ${k}: answer briefly. `.repeat(60) },
    { role: "user", content: question },
  ],
});

const cfg = configWriter("offpeak-replicas-views-");
let ups: FakeUpstream[] = [];
let spare: FakeUpstream;
let t: TestServer;

beforeAll(async () => {
  ups = await Promise.all([0, 1].map(() => startFakeUpstream({ models: [MODEL], latencyMs: 5 })));
  spare = await startFakeUpstream({ models: [MODEL], latencyMs: 5 });
  const path = cfg.write("twins.json", {
    upstreams: [{ name: "twins", engine: "vllm", models: [MODEL], max_concurrency: 4, replicas: ups.map((u) => ({ base_url: u.baseUrl })) }],
  });
  t = await startTestServer({ argv: ["--config", path] });
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
  for (const u of [...ups, spare]) await u?.stop();
  cfg.cleanup();
});

const listed = async () => ((await (await t.api("/upstreams")).json()) as any).data.find((u: any) => u.name === "twins");
const scrape = async (): Promise<Samples> => {
  const res = await t.api("/metrics");
  expect(res.status).toBe(200);
  return parseMetrics(await res.text());
};
const series = (name: string, id: string) => `${name}{upstream="twins",replica="${id}"}`;
/** A replica's five series, absent ones as undefined. */
const replicaMetrics = (s: Samples, id: string) => ({
  in_flight: s.get(series("offpeak_replica_in_flight", id)),
  requests: s.get(series("offpeak_replica_requests_total", id)),
  failures: s.get(series("offpeak_replica_failures_total", id)),
  concurrency_limit: s.get(series("offpeak_replica_concurrency_limit", id)),
  up: s.get(series("offpeak_replica_up", id)),
});

describe("/metrics per replica", () => {
  test("each replica's series: requests as the engines received them and as GET /upstreams counts them, limit, up; types declared", async () => {
    const pool = await listed();
    const ids: string[] = pool.replicas.map((r: any) => r.id);
    expect(ids.length).toBe(2);
    const before = await scrape();
    for (const id of ids) expect(replicaMetrics(before, id)).toEqual({ in_flight: 0, requests: 0, failures: 0, concurrency_limit: 4, up: 1 });
    const client = t.sdk();
    for (let k = 0; k < 24; k++) await client.chat.completions.create(chat(k, `metrics-${k}`) as any);
    const after = await scrape();
    const api = await listed();
    ups.forEach((u, i) => {
      const m = replicaMetrics(after, ids[i]!);
      // Both took some (distinct prefixes spread), and the counter is what that engine received.
      expect(u.stats.requests).toBeGreaterThan(0);
      expect(m).toEqual({ in_flight: 0, requests: u.stats.requests, failures: 0, concurrency_limit: 4, up: 1 });
      expect(api.replicas[i]).toMatchObject({ requests: m.requests, failures: 0, in_flight: 0, concurrency_limit: 4, healthy: true });
    });
    expect(ups[0]!.stats.requests + ups[1]!.stats.requests).toBe(24);
    const text = await (await t.api("/metrics")).text();
    for (const [name, type] of [
      ["offpeak_replica_in_flight", "gauge"],
      ["offpeak_replica_requests_total", "counter"],
      ["offpeak_replica_failures_total", "counter"],
      ["offpeak_replica_concurrency_limit", "gauge"],
      ["offpeak_replica_up", "gauge"],
    ])
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
  }, SCENARIO_MS);

  test("in flight: requests held by the engines show on their replicas, then go", async () => {
    const ids: string[] = (await listed()).replicas.map((r: any) => r.id);
    for (const u of ups) u.latencyMs = (c) => (c.startsWith("held-") ? 8000 : 5);
    try {
      const client = t.sdk();
      const held = [0, 1, 2, 3].map((k) => client.chat.completions.create(chat(100 + k, `held-${k}`) as any));
      // All four sent (the gauges) and arrived (the engines): held there for seconds, so both stay put while compared.
      const s = await pollUntil(scrape, (s) => ids.reduce((n, id) => n + (replicaMetrics(s, id).in_flight ?? 0), 0) === 4 && ups[0]!.stats.inFlight + ups[1]!.stats.inFlight === 4, {
        what: "4 requests in flight over the replicas",
        progress: (s) => [ids.map((id) => replicaMetrics(s, id).in_flight), ups.map((u) => u.stats.inFlight)],
      });
      // Each replica's gauge is what its engine holds now.
      ids.forEach((id, i) => expect(replicaMetrics(s, id).in_flight).toBe(ups[i]!.stats.inFlight));
      await Promise.all(held);
      const done = await scrape();
      for (const id of ids) expect(replicaMetrics(done, id).in_flight).toBe(0);
    } finally {
      for (const u of ups) u.latencyMs = 5;
    }
  }, SCENARIO_MS);

  test("a replica that stops answering: its failures count, it is down (0) as GET /upstreams says, and up (1) again once back", async () => {
    const ids: string[] = (await listed()).replicas.map((r: any) => r.id);
    const victim = ups[1]!;
    const failuresBefore = replicaMetrics(await scrape(), ids[1]!).failures!;
    await victim.down();
    try {
      const client = t.sdk();
      // Distinct prefixes until some went to the victim and its breaker opened (failures in a row).
      for (let k = 200; k < 260; k++) {
        await client.chat.completions.create(chat(k, `victim-${k}`) as any).catch(() => null);
        if (replicaMetrics(await scrape(), ids[1]!).up === 0) break;
      }
      const s = await scrape();
      expect(replicaMetrics(s, ids[1]!).up).toBe(0);
      expect(replicaMetrics(s, ids[1]!).failures!).toBeGreaterThan(failuresBefore);
      expect(replicaMetrics(s, ids[0]!)).toMatchObject({ up: 1, failures: 0 });
      expect((await listed()).replicas[1]).toMatchObject({ healthy: false, state: "down", failures: replicaMetrics(s, ids[1]!).failures });
    } finally {
      await victim.up();
    }
    await pollUntil(scrape, (s) => replicaMetrics(s, ids[1]!).up === 1, { what: "the revived replica's up gauge", progress: (s) => replicaMetrics(s, ids[1]!) });
  }, SCENARIO_MS);

  test("Counter.setTotal: the total as copied (a count kept elsewhere); a negative total is refused", () => {
    const r = new Registry();
    const c = r.counter("x_total", "h", ["a"]);
    c.setTotal(["p"], 41);
    c.setTotal(["p"], 42);
    expect(r.render()).toContain('x_total{a="p"} 42\n');
    c.reset();
    expect(r.render()).not.toContain('x_total{a="p"}');
    expect(() => c.setTotal(["p"], -1)).toThrow();
  });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `offpeak ARGS` against the test server (base URL and admin key in the environment unless overridden). */
async function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], {
    env: cleanEnv({ OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin, ...env }),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** A failed expectation shows what the command printed. */
function expectCode(r: Run, code: number): void {
  if (r.code !== code) throw new Error(`expected exit ${code}, got ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
}

describe("offpeak upstreams", () => {
  test("help: the group's verbs and exit codes; the top help names it", async () => {
    const r = await cli(["upstreams", "--help"]);
    expectCode(r, 0);
    for (const w of ["list", "add", "drain", "activate", "remove", "--weight", "--json", "--base-url", "Exit codes"]) expect(r.stdout).toContain(w);
    const top = await cli(["--help"]);
    expectCode(top, 0);
    expect(top.stdout).toContain("upstreams list|add|drain|activate|remove");
    const none = await cli(["upstreams"]);
    expectCode(none, 2);
    expect(none.stderr).toContain("drain");
  }, SCENARIO_MS);

  test("list: a table of every replica (state, in flight, limit, health, latency); --json: what GET /upstreams answers", async () => {
    const pool = await listed();
    const r = await cli(["upstreams", "list"]);
    expectCode(r, 0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^UPSTREAM\s+REPLICA\s+BASE_URL\s+STATE\s+IN_FLIGHT\s+LIMIT\s+HEALTHY\s+LATENCY$/);
    expect(lines.length).toBe(3);
    pool.replicas.forEach((rep: any, i: number) => {
      const cells = lines[1 + i]!.split(/\s{2,}/);
      expect(cells.slice(0, 7)).toEqual(["twins", rep.id, rep.base_url, "active", "0", "4", "yes"]);
      // Both answered requests in the tests above: a mean latency in ms.
      expect(cells[7]).toMatch(/^\d+ ms$/);
    });
    const j = await cli(["upstreams", "list", "--json"]);
    expectCode(j, 0);
    const parsed = JSON.parse(j.stdout);
    expect(parsed.object).toBe("list");
    expect(parsed.data.find((u: any) => u.name === "twins").replicas.map((x: any) => [x.id, x.state])).toEqual(pool.replicas.map((x: any) => [x.id, x.state]));
  }, SCENARIO_MS);

  test("drain by id: no new request reaches it and the listing says draining; activate by base URL: active again", async () => {
    const target = (await listed()).replicas[0];
    const d = await cli(["upstreams", "drain", "twins", target.id]);
    expectCode(d, 0);
    expect(JSON.parse(d.stdout)).toMatchObject({ id: target.id, state: "draining" });
    expect(d.stderr).toContain("draining");
    expect((await listed()).replicas[0].state).toBe("draining");
    expect((await cli(["upstreams", "list"])).stdout).toMatch(new RegExp(`${target.id}\\s+\\S+\\s+draining\\s`));
    const before = ups[0]!.stats.requests;
    const client = t.sdk();
    for (let k = 300; k < 310; k++) await client.chat.completions.create(chat(k, `drained-${k}`) as any);
    expect(ups[0]!.stats.requests).toBe(before);
    const a = await cli(["upstreams", "activate", "twins", target.base_url]);
    expectCode(a, 0);
    expect(JSON.parse(a.stdout)).toMatchObject({ id: target.id, state: "active" });
    expect((await listed()).replicas[0].state).toBe("active");
  }, SCENARIO_MS);

  test("add with --weight: it takes work; the same URL again exits 2 with the server's message; remove by a start of its id: it leaves", async () => {
    const added = await cli(["upstreams", "add", "twins", spare.baseUrl, "--weight", "2"]);
    expectCode(added, 0);
    const rep = JSON.parse(added.stdout);
    expect(rep).toMatchObject({ object: "upstream.replica", base_url: spare.baseUrl, weight: 2, state: "active", source: "api" });
    const again = await cli(["upstreams", "add", "twins", spare.baseUrl]);
    expectCode(again, 2);
    expect(again.stderr).toContain("replica_exists");
    const client = t.sdk();
    for (let k = 400; k < 430 && spare.stats.requests === 0; k++) await client.chat.completions.create(chat(k, `after-add-${k}`) as any);
    expect(spare.stats.requests).toBeGreaterThan(0);
    const gone = await cli(["upstreams", "remove", "twins", rep.id.slice(0, 12)]);
    expectCode(gone, 0);
    expect(JSON.parse(gone.stdout)).toEqual({ id: rep.id, object: "upstream.replica", deleted: true });
    await waitFor(async () => !(await listed()).replicas.some((r: any) => r.id === rep.id), "the removed replica to leave the listing");
  }, SCENARIO_MS);

  test("mistakes exit 2 and change nothing: unknown upstream or replica, missing arguments, a bad weight, a key without admin", async () => {
    const before = JSON.stringify((await listed()).replicas.map((r: any) => [r.id, r.state, r.weight]));
    const id = (await listed()).replicas[0].id;
    const nope = await cli(["upstreams", "drain", "nope", id]);
    expectCode(nope, 2);
    expect(nope.stderr).toContain("not_found");
    const noReplica = await cli(["upstreams", "drain", "twins", "rep_00000000000000000000"]);
    expectCode(noReplica, 2);
    expect(noReplica.stderr).toContain("not_found");
    const unknownRef = await cli(["upstreams", "activate", "twins", "http://127.0.0.1:9/v1"]);
    expectCode(unknownRef, 2);
    expect(unknownRef.stderr).toContain("has no replica");
    const missing = await cli(["upstreams", "add", "twins"]);
    expectCode(missing, 2);
    expect(missing.stderr).toContain("missing BASE_URL");
    expectCode(await cli(["upstreams", "add", "twins", "http://127.0.0.1:9/v1", "--weight", "lots"]), 2);
    const zero = await cli(["upstreams", "add", "twins", "http://127.0.0.1:9/v1", "--weight", "0"]);
    expectCode(zero, 2);
    expect(zero.stderr).toContain("invalid_value");
    const reader = await t.createKey({ name: "not-admin", scopes: ["inference", "files:read"] });
    const refused = await cli(["upstreams", "drain", "twins", id], { OFFPEAK_API_KEY: reader });
    expectCode(refused, 2);
    expect(refused.stderr).toContain("HTTP 403");
    expectCode(await cli(["upstreams", "list"], { OFFPEAK_API_KEY: reader }), 2);
    expect(JSON.stringify((await listed()).replicas.map((r: any) => [r.id, r.state, r.weight]))).toBe(before);
  }, SCENARIO_MS);
});

// Replicas on a cluster (docs/CONTRACT.md §21, §14): two nodes on one
// Postgres with the same config. A replica drained through one node gets no
// new request from the other within a second or so; one added through a node
// takes the other node's requests too; and both nodes send a prompt prefix
// to the same replica (the choice is a function of the prefix and the set,
// not of a node's history).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { configWriter } from "./helpers/inference";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startPostgres } from "./helpers/postgres";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS, pollUntil } from "./helpers/wait";

const MODEL = "cluster-pool";
const prefix = (k: number) => `Cluster prompt ${k}. ` + "Keep answers short. ".repeat(60);
const chat = (k: number, q: string) => ({ model: MODEL, messages: [{ role: "system", content: prefix(k) }, { role: "user", content: q }] });
const jsonBody = (body: unknown, method = "POST"): RequestInit => ({ method, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("replicas on two nodes of one Postgres", () => {
  const cfg = configWriter("offpeak-replicas-cluster-");
  let ups: FakeUpstream[] = [];
  let spare: FakeUpstream;
  let nodes: TestServer[] = [];

  const listed = async (t: TestServer) => ((await (await t.api("/upstreams")).json()) as any).data[0];
  const ask = (t: TestServer, k: number, q: string) => t.sdk().chat.completions.create(chat(k, q) as any);
  const where = (content: string) => ups.findIndex((u) => (u.counts.get(content) ?? 0) > 0);

  beforeAll(async () => {
    ups = await Promise.all([0, 1].map(() => startFakeUpstream({ models: [MODEL] })));
    spare = await startFakeUpstream({ models: [MODEL] });
    const config = cfg.write("c.json", { upstreams: [{ name: "pool", models: [MODEL], max_concurrency: 8, replicas: ups.map((u) => ({ base_url: u.baseUrl })) }] });
    const dbUrl = await (await startPostgres()).createDatabase();
    nodes = [];
    for (let i = 0; i < 2; i++) nodes.push(await startTestServer({ argv: ["--config", config, "--database-url", dbUrl], env: { OFFPEAK_NODE_NAME: `replica-node-${i}` } }));
  }, SCENARIO_MS);

  afterAll(async () => {
    for (const n of nodes) await n.stop();
    for (const u of [...ups, spare]) await u?.stop();
    cfg.cleanup();
  });

  test("both nodes send a prefix to the same replica", async () => {
    for (let k = 0; k < 12; k++) {
      await ask(nodes[0]!, k, `a-${k}`);
      await ask(nodes[1]!, k, `b-${k}`);
      expect({ k, b: where(`b-${k}`) }).toEqual({ k, b: where(`a-${k}`) });
    }
  });

  test("a replica drained on one node gets no new request from the other", async () => {
    const id = (await listed(nodes[0]!)).replicas[0].id;
    expect((await nodes[0]!.api(`/upstreams/pool/replicas/${id}`, jsonBody({ state: "draining" }, "PATCH"))).status).toBe(200);
    await pollUntil(() => listed(nodes[1]!), (u: any) => u.replicas[0].state === "draining", { what: "node 1 to see the drain" });
    const before = ups[0]!.stats.requests;
    for (let k = 100; k < 120; k++) await ask(nodes[1]!, k, `drained-${k}`);
    expect(ups[0]!.stats.requests).toBe(before);
    expect((await nodes[1]!.api(`/upstreams/pool/replicas/${id}`, jsonBody({ state: "active" }, "PATCH"))).status).toBe(200);
    await pollUntil(() => listed(nodes[0]!), (u: any) => u.replicas[0].state === "active", { what: "node 0 to see it active again" });
  }, SCENARIO_MS);

  test("a replica added on one node takes the other node's requests", async () => {
    expect((await nodes[1]!.api("/upstreams/pool/replicas", jsonBody({ base_url: spare.baseUrl }))).status).toBe(201);
    await pollUntil(() => listed(nodes[0]!), (u: any) => u.replicas.some((r: any) => r.base_url === spare.baseUrl), { what: "node 0 to see the added replica" });
    for (let k = 200; k < 240; k++) await ask(nodes[0]!, k, `added-${k}`);
    expect([...spare.counts.keys()].filter((c) => c.startsWith("added-")).length).toBeGreaterThan(0);
  }, SCENARIO_MS);
});

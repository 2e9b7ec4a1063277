// A replica with `resolve: "dns"` (docs/CONTRACT.md §21): one replica per
// address its host resolves to, source "dns", named by upstream and address;
// requests reach the engine through them.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { configWriter } from "./helpers/inference";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const cfg = configWriter("offpeak-replicas-dns-");
let up: FakeUpstream;
let t: TestServer;

beforeAll(async () => {
  up = await startFakeUpstream({ models: ["dns-model"] });
  const config = cfg.write("c.json", { upstreams: [{ name: "by-dns", models: ["dns-model"], replicas: [{ base_url: `http://localhost:${up.port}/v1`, resolve: "dns" }] }] });
  t = await startTestServer({ argv: ["--config", config] });
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
  await up?.stop();
  cfg.cleanup();
});

test("the host's addresses become replicas of their own (source dns), and requests reach the engine through them", async () => {
  const upstream = ((await (await t.api("/upstreams")).json()) as any).data[0];
  const urls = upstream.replicas.map((r: any) => r.base_url);
  expect(urls).toContain(`http://127.0.0.1:${up.port}/v1`);
  expect(urls.some((u: string) => u.includes("localhost"))).toBe(false);
  for (const r of upstream.replicas) expect(r).toMatchObject({ source: "dns", state: "active" });
  const answer = await t.sdk().chat.completions.create({ model: "dns-model", messages: [{ role: "user", content: "through dns" }] });
  expect(answer.choices[0]!.message.content).toContain("through dns");
  expect(up.counts.get("through dns")).toBe(1);
});

// docs/CONTRACT.md §8: GET /status (any valid key, no scope) with its exact shape and
// values, `degraded` (still 200) when an upstream is down — at start or
// later — and back to `ok` when it recovers; GET /healthz outside the base
// without a key.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import pkg from "../package.json";
import { REQUEST_ID, configWriter, eventually, json, startScriptedUpstream, type ScriptedUpstream } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { freePort } from "./helpers/env";

const cfg = configWriter("offpeak-status-");
afterAll(() => cfg.cleanup());

function expectStatusShape(s: any) {
  expect(Object.keys(s).sort()).toEqual(["batches", "database", "models", "nodes", "peak_hours", "status", "storage", "upstreams", "uptime_s", "version"]);
  expect(["ok", "degraded"]).toContain(s.status);
  expect(s.version).toBe(pkg.version);
  expect(Number.isInteger(s.uptime_s)).toBe(true);
  expect(s.uptime_s).toBeGreaterThanOrEqual(0);
  expect(s.uptime_s).toBeLessThan(600);
  expect(Object.keys(s.database).sort()).toEqual(["kind", "ok"]);
  expect(["sqlite", "postgres"]).toContain(s.database.kind);
  // docs/CONTRACT.md §14: the nodes on this database; a single server is one live node that runs what it reports.
  expect(s.nodes.length).toBeGreaterThanOrEqual(1);
  for (const n of s.nodes) {
    expect(Object.keys(n).sort()).toEqual(["id", "last_seen", "live", "shards", "started_at"]);
    expect(Number.isInteger(n.started_at) && Number.isInteger(n.last_seen) && Number.isInteger(n.shards)).toBe(true);
  }
  expect(s.nodes.filter((n: any) => n.live).length).toBe(1);
  expect(Object.keys(s.storage).sort()).toEqual(["free_bytes", "ok"]);
  expect(Object.keys(s.batches).sort()).toEqual(["finalizing", "in_progress", "validating"]);
  for (const v of Object.values(s.batches)) expect(Number.isInteger(v)).toBe(true);
  for (const m of s.models) {
    expect(Object.keys(m).sort()).toEqual(["healthy", "id", "in_flight", "owned_by", "queued"]);
    expect(typeof m.healthy).toBe("boolean");
    expect(Number.isInteger(m.in_flight)).toBe(true);
    expect(Number.isInteger(m.queued)).toBe(true);
  }
}

describe("a healthy server", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  });
  afterAll(async () => {
    await t?.stop();
  });

  test("GET /status: ok, with every field and real values", async () => {
    const res = await t.api("/status");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    const s = await json(res);
    expectStatusShape(s);
    expect(s.status).toBe("ok");
    expect(s.database.ok).toBe(true);
    expect(s.storage.ok).toBe(true);
    if (t.storage) {
      // Files in a bucket (OFFPEAK_TEST_STORAGE=s3): it has no free space to tell (docs/OPERATING.md).
      expect(s.storage.free_bytes).toBeNull();
    } else {
      expect(Number.isInteger(s.storage.free_bytes)).toBe(true);
      expect(s.storage.free_bytes).toBeGreaterThan(0);
    }
    expect(s.batches).toEqual({ validating: 0, in_progress: 0, finalizing: 0 });
    expect(s.models).toEqual([
      { id: "offpeak-echo", owned_by: "offpeak", healthy: true, in_flight: 0, queued: 0 },
      { id: "offpeak-embed", owned_by: "offpeak", healthy: true, in_flight: 0, queued: 0 },
    ]);
  });

  test("any valid key may read it, whatever its scopes; also under /v1", async () => {
    for (const scopes of [["files:read"], ["batches:write"], ["inference"]]) {
      const key = await t.createKey({ name: `status-${scopes[0]}`, scopes });
      const res = await t.api("/status", { key });
      expect(res.status).toBe(200);
      expect((await json(res)).status).toBe("ok");
    }
    const v1 = await fetch(`${t.url}/v1/status`, { headers: { authorization: `Bearer ${t.admin}` } });
    expect(v1.status).toBe(200);
    expectStatusShape(await json(v1));
  });

  test("uptime_s grows", async () => {
    const a = (await json(await t.api("/status"))).uptime_s;
    await Bun.sleep(1100);
    const b = (await json(await t.api("/status"))).uptime_s;
    expect(b).toBeGreaterThanOrEqual(a + 1);
  });

  test("GET /healthz: 200 `ok` as text, no key needed (a bad key does not matter either)", async () => {
    for (const headers of [{}, { authorization: "Bearer nonsense" }] as Record<string, string>[]) {
      const res = await fetch(`${t.url}/healthz`, { headers });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("ok");
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
      expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    }
  });
});

describe("degraded", () => {
  test("an upstream that is down at start: degraded (still 200), its model unhealthy, the rest healthy", async () => {
    const port = freePort();
    const config = cfg.write("dead.json", { upstreams: [{ name: "dead", base_url: `http://127.0.0.1:${port}/v1`, models: ["dead-chat"] }] });
    const t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
    try {
      const res = await t.api("/status");
      expect(res.status).toBe(200);
      const s = await json(res);
      expectStatusShape(s);
      expect(s.status).toBe("degraded");
      expect(s.database.ok).toBe(true);
      expect(s.storage.ok).toBe(true);
      expect(s.models.find((m: any) => m.id === "dead-chat")).toEqual({ id: "dead-chat", owned_by: "dead", healthy: false, in_flight: 0, queued: 0 });
      expect(s.models.filter((m: any) => m.id !== "dead-chat").every((m: any) => m.healthy)).toBe(true);
      // The model is still listed and answers 502 when used.
      expect((await t.api("/models/dead-chat")).status).toBe(200);
    } finally {
      await t.stop();
    }
  });

  test("an upstream that goes down after start turns the status degraded, and ok again when it recovers", async () => {
    let up: ScriptedUpstream | undefined;
    let t: TestServer | undefined;
    try {
      up = await startScriptedUpstream({ models: ["flaky-chat"] });
      t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_BATCH_WORKERS: "1" } });
      const status = async () => json(await t!.api("/status"));
      const first = await status();
      expect(first.status).toBe("ok");
      expect(first.models.find((m: any) => m.id === "flaky-chat")?.healthy).toBe(true);

      up.modelsStatus = 503;
      const down = await eventually(async () => {
        const s = await status();
        return s.status === "degraded" ? s : null;
      }, "GET /status to report the upstream down", 8000, 100);
      expectStatusShape(down);
      expect(down.models.find((m: any) => m.id === "flaky-chat")?.healthy).toBe(false);

      up.modelsStatus = null;
      const back = await eventually(async () => {
        const s = await status();
        return s.status === "ok" ? s : null;
      }, "GET /status to report the upstream back", 8000, 100);
      expect(back.models.find((m: any) => m.id === "flaky-chat")?.healthy).toBe(true);
    } finally {
      await t?.stop();
      await up?.stop();
    }
  });
});

// docs/CONTRACT.md §16: GET /status for a non-admin key shows its own project's batch
// counts only, and nothing about the machines and network behind offpeak (no
// host names, pids, upstream URLs or upstream error texts); an admin key sees
// all of it. The upstream here is down, so that there is an error text to hide.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { hostname } from "node:os";
import { chatReq, createBatch, pollUntil } from "./helpers/batches";
import { configWriter, json } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";
import { freePort } from "./helpers/env";

const cfg = configWriter("offpeak-status-visibility-");
const NODE_NAME = "status-secret-host";
const KEY_SCOPES = ["files:read", "files:write", "batches:read", "batches:write"];

let t: TestServer;
let port: number;
const keys: Record<"alpha" | "beta" | "gamma", string> = { alpha: "", beta: "", gamma: "" };
const batchIds: string[] = [];

beforeAll(async () => {
  port = freePort();
  // One request at a time, 2 s each: the batches keep running for the whole test.
  const config = cfg.write("status.json", {
    upstreams: [{ name: "gpu", base_url: `http://127.0.0.1:${port}/v1`, models: ["gpu-chat"] }],
    models: { "offpeak-echo": { latency_ms: 2000, max_concurrency: 1 } },
  });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_NODE_NAME: NODE_NAME, OFFPEAK_BATCH_WORKERS: "1" } });
  for (const p of ["alpha", "beta", "gamma"] as const) keys[p] = await t.createKey({ name: p, project: p, scopes: KEY_SCOPES });
  // alpha runs one batch, beta two, gamma none.
  for (const p of ["alpha", "beta", "beta"] as const) {
    const { batch } = await createBatch(t.sdk(keys[p]), Array.from({ length: 30 }, (_, i) => chatReq(`${p}-${i}`, "hi")));
    batchIds.push(batch.id);
  }
  await pollUntil(async () => active((await json(await t.api("/status"))).batches), (n) => n === 3, 20_000, 50, "three batches running");
});

// Its batches wait on an upstream that is down: stopping lets their Workers
// checkpoint (a grace of up to 7 s), longer than a hook's default 5 s.
afterAll(async () => {
  for (const id of batchIds) await t?.api(`/batches/${id}/cancel`, { method: "POST" });
  await t?.stop();
  cfg.cleanup();
}, SCENARIO_MS);

/** Batches not yet ended: which of validating/in_progress a batch is in changes as the runner takes them. */
const active = (b: { validating: number; in_progress: number; finalizing: number }) => b.validating + b.in_progress + b.finalizing;

const status = async (key: string) => {
  const res = await t.api("/status", { key });
  expect(res.status).toBe(200);
  const text = await res.text();
  return { text, body: JSON.parse(text) };
};

describe("GET /status by key", () => {
  test("an admin key sees every project's counts, the nodes (host name, pid) and the upstream's error text", async () => {
    const { body } = await status(t.admin);
    expect(body.status).toBe("degraded");
    expect(Object.keys(body.batches).sort()).toEqual(["finalizing", "in_progress", "validating"]);
    expect(active(body.batches)).toBe(3);
    expect(body.nodes.length).toBe(1);
    expect(body.nodes[0].id).toStartWith(`${NODE_NAME}:${process.pid}:`);
    expect(body.upstreams).toEqual([{ name: "gpu", healthy: false, since: expect.any(Number), last_error: expect.any(String) }]);
    expect(body.upstreams[0].last_error.length).toBeGreaterThan(0);
  });

  test("a non-admin key sees its own project's counts only", async () => {
    expect(active((await status(keys.alpha)).body.batches)).toBe(1);
    expect(active((await status(keys.beta)).body.batches)).toBe(2);
    expect((await status(keys.gamma)).body.batches).toEqual({ validating: 0, in_progress: 0, finalizing: 0 });
  });

  test("a non-admin key sees health, but no host name, pid, upstream URL or error text", async () => {
    const adminView = (await status(t.admin)).body;
    const lastError: string = adminView.upstreams[0].last_error;
    for (const key of [keys.alpha, keys.gamma]) {
      const { text, body } = await status(key);
      // Still what a client needs to decide whether to wait.
      expect(body.status).toBe("degraded");
      expect(body.models.find((m: any) => m.id === "gpu-chat")).toEqual({ id: "gpu-chat", owned_by: "gpu", healthy: false, in_flight: 0, queued: 0 });
      expect(body.upstreams).toEqual([{ name: "gpu", healthy: false, since: expect.any(Number) }]);
      expect(Object.keys(body).sort()).toEqual(["batches", "database", "models", "peak_hours", "status", "storage", "upstreams", "uptime_s", "version"]);
      // Nowhere in the answer, in any field.
      expect(text).not.toContain(NODE_NAME);
      if (hostname().length >= 4) expect(text).not.toContain(hostname());
      expect(text).not.toContain(`:${process.pid}:`);
      expect(text).not.toContain(`127.0.0.1`);
      expect(text).not.toContain(`:${port}`);
      expect(text).not.toContain(lastError);
      expect(text).not.toContain("last_error");
    }
  });
});

// docs/CONTRACT.md §8 / §6: GET /status is "degraded" while an upstream that discovers
// its own models (OFFPEAK_UPSTREAM_URL, or upstreams[] without `models`)
// fails its check, even when it never had a model because it was down from
// the start, and "ok" again once it answers. GET /models/{id} is in the
// OpenAPI document, and ids with "/" still work through it.
import { afterAll, describe, expect, test } from "bun:test";
import { startFakeUpstream } from "./helpers/fakeUpstream";
import { configWriter, eventually, expectError, json } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { freePort } from "./helpers/env";

const cfg = configWriter("offpeak-status-upstreams-");
afterAll(() => cfg.cleanup());

const SLASH_ID = "meta-llama/Llama-3.1-8B";

/** A minimal OpenAI-compatible upstream on a given loopback port: it only lists models. */
function serveModelsOn(port: number, models: string[]) {
  return Bun.serve({
    port,
    hostname: "127.0.0.1",
    fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path === "/v1/models")
        return Response.json({ object: "list", data: models.map((id) => ({ id, object: "model", created: 1700000000, owned_by: "late" })) });
      return Response.json({ error: { message: "not here", type: "invalid_request_error", param: null, code: null } }, { status: 404 });
    },
  });
}

describe("an upstream that discovers its models", () => {
  test("OFFPEAK_UPSTREAM_URL down from the start: degraded; once it answers, ok with its models", async () => {
    const port = freePort();
    let t: TestServer | undefined;
    let late: ReturnType<typeof serveModelsOn> | undefined;
    try {
      t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${port}/v1`, OFFPEAK_BATCH_WORKERS: "1" } });
      const status = async () => json(await t!.api("/status"));

      const down = await status();
      expect(down.status).toBe("degraded");
      // It never had a model, so only the built-ins are listed, all healthy:
      // the degraded status comes from the upstream's own failed check.
      expect(down.models.map((m: any) => m.id)).toEqual(["offpeak-echo", "offpeak-embed"]);
      expect(down.models.every((m: any) => m.healthy)).toBe(true);
      expect(Object.keys(down).sort()).toEqual(["batches", "database", "models", "nodes", "peak_hours", "status", "storage", "upstreams", "uptime_s", "version"]);
      // docs/CONTRACT.md §11: the upstream itself is listed, down, with why.
      expect(down.upstreams).toEqual([{ name: "upstream", healthy: false, since: expect.any(Number), last_error: expect.stringContaining("GET /models") }]);
      await expectError(await t.api(`/models/${SLASH_ID}`), 404, { code: "model_not_found", param: "model" });

      // The upstream comes up on that port; GET /status re-checks (its
      // last check is at most 1 s old) and discovers the models.
      late = serveModelsOn(port, [SLASH_ID]);
      // (Its health and its model list are two reads of the engine: wait for both.)
      const back = await eventually(async () => {
        const s = await status();
        return s.status === "ok" && s.models.some((m: any) => m.id === SLASH_ID) ? s : null;
      }, "GET /status to report the upstream back, with its models", 8000, 100);
      expect(back.models.find((m: any) => m.id === SLASH_ID)).toEqual({ id: SLASH_ID, owned_by: "upstream", healthy: true, in_flight: 0, queued: 0 });
      const m = await t.api(`/models/${SLASH_ID}`);
      expect(m.status).toBe(200);
      expect(await json(m)).toEqual({ id: SLASH_ID, object: "model", created: expect.any(Number), owned_by: "upstream" });

      // And degraded again when it goes away.
      late.stop(true);
      late = undefined;
      await eventually(async () => (await status()).status === "degraded", "GET /status to report the upstream down again", 8000, 100);
    } finally {
      late?.stop(true);
      await t?.stop();
    }
  });

  test("an upstreams[] entry without `models`, down from the start: degraded", async () => {
    const port = freePort();
    const config = cfg.write("discover-dead.json", { upstreams: [{ name: "gone", base_url: `http://127.0.0.1:${port}/v1` }] });
    const t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
    try {
      const res = await t.api("/status");
      expect(res.status).toBe(200);
      const s = await json(res);
      expect(s.status).toBe("degraded");
      expect(s.models.map((m: any) => m.id)).toEqual(["offpeak-echo", "offpeak-embed"]);
    } finally {
      await t.stop();
    }
  });
});

describe("GET /models/{id}", () => {
  test("is in the OpenAPI document, and ids with '/' keep working", async () => {
    const up = await startFakeUpstream({ models: [SLASH_ID, "plain-model"] });
    const t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: up.baseUrl, OFFPEAK_BATCH_WORKERS: "1" } });
    try {
      const doc = await json(await fetch(`${t.url}/docs/json`));
      const op = doc.paths["/api/v1/models/{id}"]?.get;
      expect(op).toBeDefined();
      expect(op.parameters).toContainEqual(expect.objectContaining({ in: "path", name: "id", required: true }));
      // Like every other route, it is documented once, under the canonical base.
      expect(Object.keys(doc.paths).some((p) => p.startsWith("/v1/"))).toBe(false);
      expect(Object.keys(doc.paths).some((p) => p.includes("*"))).toBe(false);

      const get = (path: string, key?: string | null) => t.api(path, { key });
      for (const [path, id] of [
        [`/models/${SLASH_ID}`, SLASH_ID],
        [`/models/${encodeURIComponent(SLASH_ID)}`, SLASH_ID],
        ["/models/plain-model", "plain-model"],
        ["/models/offpeak-echo", "offpeak-echo"],
      ] as const) {
        const res = await get(path);
        expect(res.status).toBe(200);
        expect((await json(res)).id).toBe(id);
      }
      const v1 = await fetch(`${t.url}/v1/models/${SLASH_ID}`, { headers: { authorization: `Bearer ${t.admin}` } });
      expect(v1.status).toBe(200);
      expect((await json(v1)).id).toBe(SLASH_ID);

      for (const [path, id] of [
        ["/models/meta-llama/nope", "meta-llama/nope"],
        ["/models/nope", "nope"],
        [`/models/${SLASH_ID}/`, `${SLASH_ID}/`],
      ] as const)
        await expectError(await get(path), 404, { code: "model_not_found", param: "model", message: `The model '${id}' does not exist` });

      // Auth unchanged: no key → 401, a key without the inference scope → 403, for both shapes of id.
      const filesOnly = await t.createKey({ name: "files-only", scopes: ["files:read"] });
      for (const path of ["/models/plain-model", `/models/${SLASH_ID}`]) {
        expect((await get(path, null)).status).toBe(401);
        expect((await get(path, filesOnly)).status).toBe(403);
      }
    } finally {
      await t.stop();
      await up.stop();
    }
  });
});

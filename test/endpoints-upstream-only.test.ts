// docs/CONTRACT.md §22 "Endpoint kinds": /v1/moderations and vLLM's /v1/score
// and /v1/rerank, for upstream models only (src/endpoints/upstreamOnly.ts,
// src/upstreamOnly/routes.ts), interactively and as batch endpoints, on a
// scripted engine that serves them; a built-in model named for one is
// refused as for any endpoint it does not serve; a batch whose endpoint no
// model serves — an unknown path, or one of these with no upstream model
// configured — is refused at creation with 400 unsupported_endpoint.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { createBatch, readResults, uploadBatchFile, waitBatch, type ResultLine } from "./helpers/batches";
import { configWriter, expectError, jsonResponse, json, startScriptedUpstream, type ScriptedUpstream, type UpstreamRequest } from "./helpers/inference";
import { startTestServer, uploadRaw, type TestServer } from "./helpers/server";

const PRICE = { input_per_million: 2, output_per_million: 4 };
const ENGINE_MODEL = "BAAI/bge-reranker-v2-m3";

/** vLLM's answers (and OpenAI's for moderations), in their shapes; a text "refuse me" gets the engine's own 400. */
function engine(r: UpstreamRequest): Response {
  const b = r.body ?? {};
  if (JSON.stringify(b).includes("refuse me")) return jsonResponse({ object: "error", message: "the engine refuses this", type: "BadRequestError", param: null, code: 400 }, 400);
  switch (r.path) {
    case "/moderations": {
      const inputs = Array.isArray(b.input) ? b.input : [b.input];
      return jsonResponse({ id: "modr-1", model: b.model, results: inputs.map((x: unknown) => ({ flagged: String(x).includes("bad"), categories: {}, category_scores: {} })) });
    }
    case "/score": {
      const right = Array.isArray(b.text_2) ? b.text_2 : [b.text_2];
      return jsonResponse({
        id: "score-1",
        object: "list",
        created: 1700000000,
        model: b.model,
        data: right.map((_: unknown, index: number) => ({ index, object: "score", score: 1 / (index + 2) })),
        usage: { prompt_tokens: 7 * right.length, total_tokens: 7 * right.length, completion_tokens: 0 },
      });
    }
    case "/rerank": {
      const docs: string[] = b.documents ?? [];
      return jsonResponse({
        id: "rerank-1",
        model: b.model,
        usage: { total_tokens: 5 * docs.length },
        results: docs.map((text, index) => ({ index, document: { text }, relevance_score: 1 / (index + 1) })).slice(0, b.top_n ?? docs.length),
      });
    }
  }
  return jsonResponse({ error: { message: `no route ${r.path}`, type: "not_found", param: null, code: null } }, 404);
}

let up: ScriptedUpstream;
let t: TestServer;
let bare: TestServer;
let client: OpenAI;
const cfg = configWriter("offpeak-upstream-only-");

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["ranker"], handler: engine });
  const config = cfg.write("config.json", {
    upstreams: [{ name: "vllm", base_url: up.baseUrl, models: ["ranker"], model_map: { ranker: ENGINE_MODEL } }],
    models: { ranker: { pricing: PRICE } },
  });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
  bare = await startTestServer();
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  await bare?.stop();
  await up?.stop();
  cfg.cleanup();
});

const post = (s: TestServer, path: string, body: unknown, key?: string | null) =>
  s.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), ...(key !== undefined ? { key } : {}) });

describe("interactive", () => {
  test("each route passes the request to the engine (model mapped, every other field untouched) and its answer back", async () => {
    up.reset();
    up.handler = engine;
    const cases: [string, Record<string, unknown>][] = [
      ["/moderations", { model: "ranker", input: ["fine", "bad words"], extra_field: { kept: true } }],
      ["/score", { model: "ranker", text_1: "what is a cat", text_2: ["a cat is an animal", "paris"], truncate_prompt_tokens: 64 }],
      ["/rerank", { model: "ranker", query: "capital of france", documents: ["paris is", "berlin is", "rome is"], top_n: 2 }],
    ];
    for (const [path, body] of cases) {
      const res = await post(t, path, body);
      expect(res.status).toBe(200);
      const answer = await json(res);
      const got = up.requests.at(-1)!;
      expect(got.path).toBe(path);
      expect(got.body).toEqual({ ...body, model: ENGINE_MODEL });
      expect(answer).toEqual(await json(engine(got)));
    }
  });

  test("the openai SDK's moderations.create works against an upstream model", async () => {
    up.handler = engine;
    const m = await client.moderations.create({ model: "ranker", input: "some bad text" });
    expect(m.results[0]!.flagged).toBe(true);
  });

  test("a built-in model is 404 model_not_found; no model is 400 missing_field; the engine's own 4xx is passed on", async () => {
    for (const path of ["/moderations", "/score", "/rerank"]) {
      for (const model of ["offpeak-echo", "offpeak-embed"]) await expectError(await post(t, path, { model, input: "x" }), 404, { code: "model_not_found", param: "model" });
      await expectError(await post(t, path, { input: "x" }), 400, { code: "missing_field", param: "model" });
      await expectError(await post(bare, path, { model: "offpeak-echo", input: "x" }), 404, { code: "model_not_found" });
    }
    const refused = await post(t, "/score", { model: "ranker", text_1: "refuse me", text_2: "x" });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(await json(refused))).toContain("the engine refuses this");
  });

  test("scope inference: no key 401, a key without it 403", async () => {
    const batchesOnly = await t.createKey({ scopes: ["batches:write", "files:write"] });
    for (const path of ["/moderations", "/score", "/rerank"]) {
      await expectError(await post(t, path, { model: "ranker", input: "x" }, null), 401);
      await expectError(await post(t, path, { model: "ranker", input: "x" }, batchesOnly), 403, { code: "insufficient_scope" });
    }
  });
});

const line = (custom_id: string, url: string, body: Record<string, unknown>) => JSON.stringify({ custom_id, method: "POST", url, body });

async function run(lines: string[], endpoint: string) {
  const { batch } = await createBatch(client, lines, { endpoint });
  expect(batch.endpoint).toBe(endpoint);
  const done = (await waitBatch(client, batch.id)) as any;
  const out = await readResults(client, done.output_file_id);
  const err = await readResults(client, done.error_file_id);
  return { done, out, err, byId: new Map<string, ResultLine>([...out, ...err].map((l) => [l.custom_id, l])) };
}

describe("batches", () => {
  test("a /v1/score batch and a /v1/rerank batch run on the engine; usage and cost come from the answers' usage", async () => {
    up.reset();
    up.handler = engine;
    const score = await run(
      [
        line("s1", "/v1/score", { model: "ranker", text_1: "q", text_2: ["a", "b"] }),
        line("s2", "/api/v1/score", { model: "ranker", text_1: "q", text_2: "c" }),
        line("s3", "/v1/score", { model: "ranker", text_1: "refuse me", text_2: "c" }),
      ],
      "/v1/score",
    );
    expect(score.done.status).toBe("completed");
    expect(score.done.request_counts).toEqual({ total: 3, completed: 2, failed: 1 });
    expect(score.byId.get("s1")!.response!.body.data.map((d: any) => d.score)).toEqual([0.5, 1 / 3]);
    expect(score.byId.get("s3")!.response!.status_code).toBe(400);
    expect(score.done.usage.input_tokens).toBe(14 + 7);
    expect(score.done.cost.amount).toBeCloseTo(((21 * PRICE.input_per_million) / 1e6) * 0.5, 9);
    expect(up.requests.filter((r) => r.path === "/score").every((r) => r.body.model === ENGINE_MODEL)).toBe(true);

    const rerank = await run([line("r1", "/v1/rerank", { model: "ranker", query: "q", documents: ["x", "y", "z"], top_n: 1 })], "/v1/rerank");
    expect(rerank.done.status).toBe("completed");
    expect(rerank.byId.get("r1")!.response!.body.results).toEqual([{ index: 0, document: { text: "x" }, relevance_score: 1 }]);
    expect(rerank.done.usage.input_tokens).toBe(15);
  });

  test("a /v1/moderations batch runs; a line naming a built-in model fails the batch at validation (model_not_found)", async () => {
    up.handler = engine;
    const ok = await run([line("m1", "/v1/moderations", { model: "ranker", input: "bad" }), line("m2", "/v1/moderations", { model: "ranker", input: "fine" })], "/v1/moderations");
    expect(ok.done.status).toBe("completed");
    expect(ok.byId.get("m1")!.response!.body.results[0].flagged).toBe(true);
    expect(ok.byId.get("m2")!.response!.body.results[0].flagged).toBe(false);

    const bad = await run([line("m1", "/v1/moderations", { model: "ranker", input: "x" }), line("m2", "/v1/moderations", { model: "offpeak-echo", input: "x" })], "/v1/moderations");
    expect(bad.done.status).toBe("failed");
    expect(bad.done.errors.data.map((e: any) => [e.line, e.code, e.param])).toEqual([[2, "model_not_found", "body.model"]]);
  });

  test("with no upstream model, a /v1/score batch is refused at creation (400 unsupported_endpoint), as is an unknown endpoint; nothing is made", async () => {
    const file = await uploadBatchFile(bare.sdk(), [line("a", "/v1/score", { model: "ranker", text_1: "q", text_2: "d" })]);
    for (const endpoint of ["/v1/score", "/v1/rerank", "/v1/moderations", "/v1/images/generations", "/v1/videos"]) {
      const e = await expectError(await post(bare, "/batches", { input_file_id: file.id, endpoint, completion_window: "24h" }), 400, { code: "unsupported_endpoint", param: "endpoint" });
      expect(e.message).toContain(endpoint);
    }
    expect((await bare.sdk().batches.list()).data).toEqual([]);
  });

  test("the upload takes the new urls; an unknown one is still refused naming its line", async () => {
    const e = await expectError(await uploadRaw(t, [line("a", "/v1/rerank", { model: "ranker", query: "q", documents: [] }), line("b", "/v1/videos", { model: "ranker" })].join("\n") + "\n"), 400, {
      param: "url",
    });
    expect(e.message).toContain("line 2");
    expect(e.message).toContain("/v1/score");
  });
});

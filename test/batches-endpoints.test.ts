// docs/CONTRACT.md §13 (and §4, §5): /v1/responses and /v1/completions as batch line
// urls and batch endpoints — accepted at upload, checked at batch
// validation (a line's url must be the batch's endpoint, its model one that
// serves it), run on offpeak-echo and on an upstream (with retries), each
// custom_id once across the output and error files, the endpoint's normal
// answer in each output line, and usage (Responses' input_tokens /
// output_tokens and their details mapped) and cost in the batch record.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { createBatch, expectExactlyOnce, expectLineShape, readResults, uploadBatchFile, waitBatch, type ResultLine } from "./helpers/batches";
import { configWriter, expectError } from "./helpers/inference";
import { startTestServer, uploadRaw, type TestServer } from "./helpers/server";

const ECHO_PRICE = { input_per_million: 1, output_per_million: 3 };
const FAKE_PRICE = { input_per_million: 2, output_per_million: 4 };

let t: TestServer;
let fake: FakeUpstream;
let client: OpenAI;
const cfg = configWriter("offpeak-batch-endpoints-");

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-model"] });
  const config = cfg.write("config.json", {
    upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-model"] }],
    models: { "offpeak-echo": { pricing: ECHO_PRICE }, "fake-model": { pricing: FAKE_PRICE } },
  });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2", OFFPEAK_BATCH_RETRY_BASE_MS: "5" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  cfg.cleanup();
});
beforeEach(() => {
  fake.reset();
  fake.plan = null;
});

const tokens = (s: string) => (s.match(/[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) ?? []).length;
const line = (custom_id: string, url: string, body: Record<string, unknown>) => JSON.stringify({ custom_id, method: "POST", url, body });
const respLine = (id: string, body: Record<string, unknown>, url = "/v1/responses") => line(id, url, { model: "offpeak-echo", ...body });
const cmplLine = (id: string, body: Record<string, unknown>, url = "/v1/completions") => line(id, url, { model: "offpeak-echo", ...body });

async function run(lines: string[], endpoint: string) {
  const { batch } = await createBatch(client, lines, { endpoint });
  expect(batch.endpoint).toBe(endpoint);
  const done = await waitBatch(client, batch.id);
  const out = await readResults(client, done.output_file_id);
  const err = await readResults(client, done.error_file_id);
  for (const l of [...out, ...err]) expectLineShape(l);
  return { done: done as any, out, err, byId: new Map<string, ResultLine>([...out, ...err].map((l) => [l.custom_id, l])) };
}

const cost = (input: number, output: number, price: { input_per_million: number; output_per_million: number }) =>
  ((input * price.input_per_million + output * price.output_per_million) / 1e6) * 0.5;

describe("/v1/responses batches", () => {
  test("on offpeak-echo: completed, each line's body a response object, usage mapped from input_tokens/output_tokens, cost at half price", async () => {
    const lines = [
      respLine("r-str", { input: "hello batch world" }),
      respLine("r-items", { instructions: "Be brief.", input: [{ role: "user", content: [{ type: "input_text", text: "part one" }, { type: "input_text", text: "part two" }] }] }),
      respLine("r-reason", { input: "think first", reasoning: { effort: "low" } }),
      respLine("r-cut", { input: "one two three four five", max_output_tokens: 2 }, "/api/v1/responses"),
      respLine("r-bad", { previous_response_id: "resp_AAAAAAAAAAAAAAAAAAAAAAAA" }),
    ];
    const { done, out, err, byId } = await run(lines, "/v1/responses");
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 5, completed: 4, failed: 1 });
    expectExactlyOnce(["r-str", "r-items", "r-reason", "r-cut", "r-bad"], out, err);

    const body = (id: string) => byId.get(id)!.response!.body;
    for (const id of ["r-str", "r-items", "r-reason", "r-cut"]) {
      expect(byId.get(id)!.response!.status_code).toBe(200);
      expect(body(id).id).toMatch(/^resp_[0-9A-Za-z]{24}$/);
      expect(body(id).object).toBe("response");
    }
    const text = (id: string) => body(id).output.find((o: any) => o.type === "message").content[0].text;
    expect(text("r-str")).toBe("hello batch world");
    expect(text("r-items")).toBe("part one\npart two");
    expect(text("r-reason")).toBe("think first");
    expect(body("r-reason").usage.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(body("r-cut").status).toBe("incomplete");
    expect(text("r-cut")).toBe("one two");
    // A request the model refuses is that line's 400, naming the field.
    const bad = byId.get("r-bad")!;
    expect(bad.response!.status_code).toBe(400);
    expect(bad.response!.body.error.param).toBe("previous_response_id");

    let input = 0;
    let output = 0;
    let reasoning = 0;
    for (const l of out) {
      input += l.response!.body.usage.input_tokens;
      output += l.response!.body.usage.output_tokens;
      reasoning += l.response!.body.usage.output_tokens_details.reasoning_tokens;
    }
    expect(input).toBe(tokens("hello batch world") + 3 + tokens("Be brief.") + 3 + tokens("part one part two") + 3 + tokens("think first") + 3 + tokens("one two three four five") + 3);
    expect(done.usage).toEqual({ input_tokens: input, input_tokens_details: { cached_tokens: 0 }, output_tokens: output, output_tokens_details: { reasoning_tokens: reasoning }, total_tokens: input + output });
    expect(reasoning).toBeGreaterThan(0);
    expect(done.cost.amount).toBeCloseTo(cost(input, output, ECHO_PRICE), 6);
    expect(done.model).toBe("offpeak-echo");
  });

  test("on an upstream: the engine's answers as sent, cached tokens counted, a 500 retried", async () => {
    fake.plan = plans.failFirst(1, { status: 500 }, (c) => c === "flaky one");
    const inputs = ["upstream one", "upstream two words", "flaky one"];
    const lines = inputs.map((input, i) => line(`u-${i}`, "/v1/responses", { model: "fake-model", input }));
    const { done, out, byId } = await run(lines, "/v1/responses");
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    expect(fake.counts.get("flaky one")).toBe(2);
    expect(fake.counts.get("upstream one")).toBe(1);
    inputs.forEach((input, i) => {
      const b = byId.get(`u-${i}`)!.response!.body;
      expect(b.id).toMatch(/^resp_fake/);
      expect(b.output[0].content[0].text).toBe(input);
    });
    const input = out.reduce((n, l) => n + l.response!.body.usage.input_tokens, 0);
    const output = out.reduce((n, l) => n + l.response!.body.usage.output_tokens, 0);
    // The fake engine reports 1 cached token per answer.
    expect(done.usage).toEqual({ input_tokens: input, input_tokens_details: { cached_tokens: 3 }, output_tokens: output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + output });
    expect(done.cost.amount).toBeCloseTo(cost(input, output, FAKE_PRICE), 6);
  });
});

describe("/v1/completions batches", () => {
  test("on offpeak-echo and an upstream: completed, text_completion bodies, usage and cost", async () => {
    const lines = [
      cmplLine("c-1", { prompt: "complete me" }),
      cmplLine("c-2", { prompt: ["a b", "c"], n: 2, max_tokens: 1 }, "/api/v1/completions"),
      cmplLine("c-bad", { prompt: 42 }),
      line("c-up", "/v1/completions", { model: "fake-model", prompt: "engine words here" }),
    ];
    const { done, out, err, byId } = await run(lines, "/v1/completions");
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
    expectExactlyOnce(["c-1", "c-2", "c-bad", "c-up"], out, err);
    const body = (id: string) => byId.get(id)!.response!.body;
    expect(body("c-1")).toMatchObject({ object: "text_completion", choices: [{ text: "complete me", index: 0, finish_reason: "stop" }] });
    expect(body("c-1").id).toMatch(/^cmpl-[0-9A-Za-z]{24}$/);
    expect(body("c-2").choices.map((c: any) => c.text)).toEqual(["a", "a", "c", "c"]);
    expect(body("c-up")).toMatchObject({ object: "text_completion", choices: [{ text: "engine words here" }] });
    expect(byId.get("c-bad")!.response).toMatchObject({ status_code: 400, body: { error: { param: "prompt" } } });
    const sum = (k: string) => out.reduce((n, l) => n + l.response!.body.usage[k], 0);
    expect(done.usage).toMatchObject({ input_tokens: sum("prompt_tokens"), output_tokens: sum("completion_tokens"), total_tokens: sum("total_tokens") });
    const echoOut = out.filter((l) => l.custom_id !== "c-up");
    const up = body("c-up").usage;
    const echoCost = cost(
      echoOut.reduce((n, l) => n + l.response!.body.usage.prompt_tokens, 0),
      echoOut.reduce((n, l) => n + l.response!.body.usage.completion_tokens, 0),
      ECHO_PRICE,
    );
    expect(done.cost.amount).toBeCloseTo(echoCost + cost(up.prompt_tokens, up.completion_tokens, FAKE_PRICE), 6);
  });
});

describe("validation", () => {
  test("upload accepts the new urls (both forms) and names the first line with an unknown one", async () => {
    const ok = await uploadBatchFile(client, [respLine("a", { input: "x" }), cmplLine("b", { prompt: "x" }, "/api/v1/completions"), respLine("c", { input: "y" }, "/api/v1/responses")]);
    expect(ok.status).toBe("processed");
    const res = await uploadRaw(t, [respLine("a", { input: "x" }), line("b", "/v1/images/generations", { model: "offpeak-echo", prompt: "x" })].join("\n") + "\n");
    const e = await expectError(res, 400, { param: "url" });
    expect(e.message).toContain("line 2");
    expect(e.message).toContain("/v1/responses");
    expect(e.message).toContain("/v1/completions");
  });

  test("batch create accepts the endpoints; one no model serves is 400 unsupported_endpoint naming it, and makes nothing", async () => {
    const file = await uploadBatchFile(client, [cmplLine("a", { prompt: "x" })]);
    const before = (await client.batches.list({ limit: 100 })).data.length;
    for (const endpoint of ["/v1/images/generations", "/v1/videos", "/v1/audio/speech", "/v1/chat/completions/", "/v2/rerank", "x".repeat(5000)]) {
      const res = await t.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ input_file_id: file.id, endpoint, completion_window: "24h" }) });
      const e = await expectError(res, 400, { code: "unsupported_endpoint", param: "endpoint" });
      expect(e.message).toContain(endpoint.slice(0, 200));
      expect(e.message.length).toBeLessThan(1000);
    }
    expect((await client.batches.list({ limit: 100 })).data.length).toBe(before);
    const created = await t.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ input_file_id: file.id, endpoint: "/api/v1/completions", completion_window: "24h" }) });
    expect(created.status).toBe(200);
    expect(((await created.json()) as { endpoint: string }).endpoint).toBe("/v1/completions");
  });

  test("a line whose url is not the batch's endpoint, or whose model does not serve it, fails the batch at validation", async () => {
    const { batch } = await createBatch(client, [respLine("a", { input: "x" }), cmplLine("b", { prompt: "x" }), line("c", "/v1/responses", { model: "offpeak-embed", input: "x" })], { endpoint: "/v1/responses" });
    const done = (await waitBatch(client, batch.id)) as any;
    expect(done.status).toBe("failed");
    expect(done.errors.data.map((e: any) => [e.line, e.code, e.param])).toEqual([
      [2, "invalid_url", "url"],
      [3, "model_not_found", "body.model"],
    ]);
    // And the other way round: a responses line in a chat batch.
    const { batch: b2 } = await createBatch(client, [respLine("a", { input: "x" })], { endpoint: "/v1/chat/completions" });
    expect(((await waitBatch(client, b2.id)) as any).errors.data[0].code).toBe("invalid_url");
  });
});

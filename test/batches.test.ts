// Batches (docs/CONTRACT.md §5): the official `openai` SDK end to end against a real
// server — create, poll, download, exactly-once; validation failures with
// line numbers; POST /batches errors; list pagination; cancel; expiry;
// retries against a fake OpenAI-compatible upstream on loopback; progress.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import {
  BATCH_ID,
  BATCH_KEYS,
  chatReq,
  createBatch,
  embedReq,
  expectExactlyOnce,
  expectLineShape,
  pollUntil,
  readResults,
  uploadBatchFile,
  waitBatch,
  type ResultLine,
} from "./helpers/batches";
import { inShare, plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, uploadRaw, type TestServer } from "./helpers/server";
import { freePort } from "./helpers/env";

const json = (res: Response): Promise<any> => res.json();
const configDir = mkdtempSync(join(tmpdir(), "offpeak-batch-cfg-"));
afterAll(() => rmSync(configDir, { recursive: true, force: true }));

function writeConfig(name: string, config: unknown): string {
  const path = join(configDir, name);
  writeFileSync(path, JSON.stringify(config));
  return path;
}

function expectError(body: any, type: string, param?: string | null) {
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error.type).toBe(type);
  if (param !== undefined) expect(body.error.param).toBe(param);
}

const sum = (lines: ResultLine[], f: (u: any) => number | undefined) => lines.reduce((a, l) => a + (f(l.response?.body?.usage ?? {}) ?? 0), 0);

/** request_counts agree with the result files, and the final invariant holds. */
function expectCountsMatchFiles(b: any, out: ResultLine[], err: ResultLine[]) {
  expect(b.request_counts.completed).toBe(out.length);
  expect(b.request_counts.failed).toBe(err.length);
  expect(b.request_counts.completed + b.request_counts.failed).toBe(b.request_counts.total);
}

// ── built-in models, no simulated latency ────────────────────────────────

describe("built-in models", () => {
  const PRICE_IN = 1000;
  const PRICE_OUT = 3000;
  let t: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    const config = writeConfig("fast.json", {
      models: { "offpeak-echo": { pricing: { input_per_million: PRICE_IN, output_per_million: PRICE_OUT } } },
    });
    t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2" } });
    client = t.sdk();
  });
  afterAll(async () => {
    await t?.stop();
  });

  test("chat batch: create → completed → output has every custom_id once, echoing its input", async () => {
    const texts = new Map<string, string>();
    const lines: string[] = [];
    for (let i = 0; i < 60; i++) {
      const id = `chat-${i}`;
      const text = `message number ${i} says ${"hi ".repeat(i % 7)}end`;
      texts.set(id, text);
      // Some requests with reasoning, so reasoning tokens are summed too.
      lines.push(chatReq(id, text, i % 10 === 0 ? { reasoning_effort: "low" } : {}));
    }
    lines.push(chatReq("two-choices", "pick me twice", { n: 2 }));
    lines.push(chatReq("cut-short", "one two three four five six", { max_tokens: 2 }));
    const ids = [...texts.keys(), "two-choices", "cut-short"];

    const { file, batch } = await createBatch(client, lines, { metadata: { project: "tests", run: "1" } });
    expect(batch.id).toMatch(BATCH_ID);
    expect(batch.object).toBe("batch");
    expect(batch.status).toBe("validating");
    expect(batch.input_file_id).toBe(file.id);
    expect(batch.endpoint).toBe("/v1/chat/completions");
    expect(batch.completion_window).toBe("24h");
    expect(batch.metadata).toEqual({ project: "tests", run: "1" });
    expect(Number.isInteger(batch.created_at)).toBe(true);
    expect(Math.abs(batch.created_at - Date.now() / 1000)).toBeLessThan(60);
    expect(batch.expires_at).toBe(batch.created_at + 24 * 3600);
    expect(batch.output_file_id).toBeNull();
    expect(batch.error_file_id).toBeNull();
    expect(batch.errors).toBeNull();
    expect(batch.in_progress_at).toBeNull();
    expect(batch.completed_at).toBeNull();
    expect(batch.request_counts!.total).toBe(ids.length);

    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");

    // The raw record: every field present, null where unset.
    const raw = await json(await t.api(`/batches/${batch.id}`));
    expect(Object.keys(raw).sort()).toEqual(BATCH_KEYS);
    expect(raw.request_counts).toEqual({ total: ids.length, completed: ids.length, failed: 0 });
    expect(raw.model).toBe("offpeak-echo");
    expect(raw.errors).toBeNull();
    expect(raw.error_file_id).toBeNull();
    for (const k of ["failed_at", "expired_at", "cancelling_at", "cancelled_at"]) expect(raw[k]).toBeNull();
    for (const k of ["created_at", "in_progress_at", "finalizing_at", "completed_at", "expires_at"]) expect(Number.isInteger(raw[k])).toBe(true);
    expect(raw.created_at).toBeLessThanOrEqual(raw.in_progress_at);
    expect(raw.in_progress_at).toBeLessThanOrEqual(raw.finalizing_at);
    expect(raw.finalizing_at).toBeLessThanOrEqual(raw.completed_at);
    expect(Object.keys(raw.usage).sort()).toEqual(["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"]);
    expect(Object.keys(raw.cost).sort()).toEqual(["amount", "currency", "discount"]);

    // The output file record.
    const outFile = await client.files.retrieve(raw.output_file_id);
    expect(outFile.purpose).toBe("batch_output");
    expect(outFile.filename).toBe(`${batch.id}_output.jsonl`);
    expect(outFile.status).toBe("processed");

    const out = await readResults(client, raw.output_file_id);
    const bytes = (await (await client.files.content(raw.output_file_id)).arrayBuffer()).byteLength;
    expect(outFile.bytes).toBe(bytes);
    expectExactlyOnce(ids, out, []);
    const reqIds = new Set<string>();
    for (const l of out) {
      expectLineShape(l);
      reqIds.add(l.id);
      expect(l.response!.status_code).toBe(200);
      expect(typeof l.response!.request_id).toBe("string");
      const body = l.response!.body;
      expect(body.object).toBe("chat.completion");
      expect(body.id).toMatch(/^chatcmpl-/);
      expect(body.model).toBe("offpeak-echo");
      if (l.custom_id === "two-choices") {
        expect(body.choices.map((c: any) => c.message.content)).toEqual(["pick me twice", "pick me twice"]);
      } else if (l.custom_id === "cut-short") {
        expect(body.choices[0].finish_reason).toBe("length");
        expect(body.usage.completion_tokens).toBe(2);
      } else {
        expect(body.choices).toHaveLength(1);
        expect(body.choices[0].message.content).toBe(texts.get(l.custom_id)!);
        expect(body.choices[0].finish_reason).toBe("stop");
      }
    }
    expect(reqIds.size).toBe(out.length);

    // usage = the sum over the output lines; cost = half the list price.
    const input = sum(out, (u) => u.prompt_tokens);
    const output = sum(out, (u) => u.completion_tokens);
    const reasoning = sum(out, (u) => u.completion_tokens_details?.reasoning_tokens);
    expect(input).toBeGreaterThan(0);
    expect(reasoning).toBeGreaterThan(0);
    expect(raw.usage).toEqual({
      input_tokens: input,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: reasoning },
      total_tokens: input + output,
    });
    expect(raw.cost.currency).toBe("USD");
    expect(raw.cost.discount).toBe(0.5);
    expect(raw.cost.amount).toBeCloseTo(((input * PRICE_IN + output * PRICE_OUT) / 1e6) * 0.5, 5);

    // The SDK sees the same record, in the list too.
    expect((await client.batches.retrieve(batch.id)).output_file_id).toBe(raw.output_file_id);
    const listed = (await client.batches.list()).data.map((b) => b.id);
    expect(listed).toContain(batch.id);
  });

  test("odd custom_ids, CRLF line endings and a UTF-8 BOM: every request once, ids kept byte for byte", async () => {
    const ids = ["ünïcödé-✓", 'quote"and\\backslash', "spaces in id", "emoji-🚀", "x".repeat(1000), "123", "new\nline"];
    const text = "\uFEFF" + ids.map((id, i) => chatReq(id, `odd ${i} — ${id.slice(0, 20)}`)).join("\r\n") + "\r\n";
    const file = await client.files.create({ file: await toFile(Buffer.from(text), "odd.jsonl"), purpose: "batch" });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: ids.length, completed: ids.length, failed: 0 });
    const out = await readResults(client, done.output_file_id);
    expectExactlyOnce(ids, out, []);
    for (const l of out) expect(l.response!.body.choices[0].message.content).toBe(`odd ${ids.indexOf(l.custom_id)} — ${l.custom_id.slice(0, 20)}`);
  });

  test("the /api/v1 forms of the endpoint and url are accepted", async () => {
    const lines = [chatReq("api-1", "first", {}, "/api/v1/chat/completions"), chatReq("api-2", "second")];
    const { batch } = await createBatch(client, lines, { endpoint: "/api/v1/chat/completions" });
    expect(batch.endpoint).toBe("/v1/chat/completions");
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expectExactlyOnce(["api-1", "api-2"], await readResults(client, done.output_file_id), []);
  });

  test("a file over 4 MB runs as several shards: every line exactly once, counts and usage add up", async () => {
    const pad = "word ".repeat(25);
    const n = 36_000;
    const ids = Array.from({ length: n }, (_, i) => `s-${i}`);
    const lines = ids.map((id) => chatReq(id, `${id} ${pad}`));
    expect(lines.join("\n").length).toBeGreaterThan(5 << 20);
    const { batch } = await createBatch(client, lines);
    const done = await waitBatch(client, batch.id, undefined, 45_000);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: n, completed: n, failed: 0 });
    const out = await readResults(client, done.output_file_id);
    expectExactlyOnce(ids, out, []);
    for (const l of out) if (l.response!.body.choices[0].message.content !== `${l.custom_id} ${pad}`) throw new Error(`wrong echo for ${l.custom_id}`);
    expect(done.usage!.input_tokens).toBe(sum(out, (u) => u.prompt_tokens));
    expect(done.usage!.output_tokens).toBe(sum(out, (u) => u.completion_tokens));
    // Working files are gone once the batch is final.
    expect(await Bun.file(join(t.dataDir, "batches", batch.id, "out-0.jsonl")).exists()).toBe(false);
  });

  test("output_expires_after sets expires_at on the result files; a bad one → 400", async () => {
    const file = await uploadBatchFile(client, [chatReq("oe-1", "x"), chatReq("oe-2", "y", { n: 0 })]);
    const res = await t.api("/batches", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", output_expires_after: { anchor: "created_at", seconds: 7200 } }),
    });
    expect(res.status).toBe(200);
    const done = await waitBatch(client, (await json(res)).id);
    for (const id of [done.output_file_id!, done.error_file_id!]) {
      const f = await client.files.retrieve(id);
      expect(f.expires_at).toBe(f.created_at + 7200);
    }
    for (const oea of [{ anchor: "created_at", seconds: 60 }, { anchor: "created_at", seconds: 2592001 }, { anchor: "completed_at", seconds: 7200 }]) {
      const bad = await t.api("/batches", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", output_expires_after: oea }),
      });
      expect(bad.status).toBe(400);
      expectError(await json(bad), "invalid_request_error");
    }
  });

  test("embeddings batch with offpeak-embed", async () => {
    const lines = [
      embedReq("e-1", "the quick brown fox"),
      embedReq("e-2", "the quick brown fox"),
      embedReq("e-3", "something else entirely"),
      embedReq("e-small", "small vector", { dimensions: 16 }),
      embedReq("e-many", ["first text", "second text", "third"]),
      embedReq("e-b64", "encoded", { encoding_format: "base64" }),
    ];
    const { batch } = await createBatch(client, lines, { endpoint: "/v1/embeddings" });
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.model).toBe("offpeak-embed");
    expect(done.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    expect(done.error_file_id).toBeNull();
    const out = await readResults(client, done.output_file_id);
    expectExactlyOnce(["e-1", "e-2", "e-3", "e-small", "e-many", "e-b64"], out, []);
    const by = new Map(out.map((l) => [l.custom_id, l]));
    for (const l of out) {
      expectLineShape(l);
      expect(l.response!.status_code).toBe(200);
      expect(l.response!.body.object).toBe("list");
      expect(l.response!.body.model).toBe("offpeak-embed");
      expect(l.response!.body.usage.prompt_tokens).toBeGreaterThan(0);
    }
    const vec = (id: string, i = 0) => by.get(id)!.response!.body.data[i].embedding;
    expect(vec("e-1")).toHaveLength(256);
    expect(vec("e-1")).toEqual(vec("e-2"));
    expect(vec("e-1")).not.toEqual(vec("e-3"));
    const norm = Math.sqrt((vec("e-3") as number[]).reduce((a, x) => a + x * x, 0));
    expect(norm).toBeCloseTo(1, 4);
    expect(vec("e-small")).toHaveLength(16);
    expect(by.get("e-many")!.response!.body.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    expect(typeof vec("e-b64")).toBe("string");
    expect(Buffer.from(vec("e-b64"), "base64").byteLength).toBe(256 * 4);

    const input = sum(out, (u) => u.prompt_tokens);
    expect(done.usage!.input_tokens).toBe(input);
    expect(done.usage!.output_tokens).toBe(0);
    expect(done.usage!.total_tokens).toBe(input);
  });

  test("requests the model rejects (400) go to the error file with their response and error:null", async () => {
    const lines = [
      chatReq("ok-1", "fine"),
      chatReq("bad-n", "n is zero", { n: 0 }),
      chatReq("bad-max", "negative max", { max_tokens: -1 }),
      chatReq("bad-messages", "x", { messages: [] }),
      chatReq("ok-2", "also fine"),
    ];
    const { batch } = await createBatch(client, lines);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
    expect(done.output_file_id).not.toBeNull();
    expect(done.error_file_id).not.toBeNull();

    const errFile = await client.files.retrieve(done.error_file_id!);
    expect(errFile.purpose).toBe("batch_output");
    expect(errFile.filename).toBe(`${batch.id}_error.jsonl`);

    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(["ok-1", "bad-n", "bad-max", "bad-messages", "ok-2"], out, err);
    expectCountsMatchFiles(done, out, err);
    expect(out.map((l) => l.custom_id).sort()).toEqual(["ok-1", "ok-2"]);
    const params: Record<string, string> = { "bad-n": "n", "bad-max": "max_tokens", "bad-messages": "messages" };
    for (const l of err) {
      expectLineShape(l);
      expect(l.error).toBeNull();
      expect(l.response!.status_code).toBe(400);
      expectError(l.response!.body, "invalid_request_error", params[l.custom_id]);
    }
    // Failed requests add no usage.
    expect(done.usage!.input_tokens).toBe(sum(out, (u) => u.prompt_tokens));
  });

  test("validation: a url that differs from the endpoint and unknown models fail the batch with 1-based line numbers", async () => {
    const lines = [
      chatReq("v-1", "ok"),
      embedReq("v-2", "an embeddings line in a chat batch"),
      chatReq("v-3", "ok"),
      chatReq("v-4", "unknown model", { model: "no-such-model" }),
      chatReq("v-5", "ok"),
      chatReq("v-6", "an embedding model on the chat endpoint", { model: "offpeak-embed" }),
    ];
    const { batch } = await createBatch(client, lines);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("failed");
    const raw = await json(await t.api(`/batches/${batch.id}`));
    expect(Object.keys(raw).sort()).toEqual(BATCH_KEYS);
    expect(raw.errors.object).toBe("list");
    for (const e of raw.errors.data) {
      expect(Object.keys(e).sort()).toEqual(["code", "line", "message", "param"]);
      expect(e.message).toContain(String(e.line));
    }
    expect(raw.errors.data.map((e: any) => [e.line, e.code, e.param])).toEqual([
      [2, "invalid_url", "url"],
      [4, "model_not_found", "body.model"],
      [6, "model_not_found", "body.model"],
    ]);
    expect(Number.isInteger(raw.failed_at)).toBe(true);
    for (const k of ["in_progress_at", "finalizing_at", "completed_at", "expired_at", "cancelling_at", "cancelled_at", "output_file_id", "error_file_id"]) expect(raw[k]).toBeNull();
    expect(raw.request_counts.completed).toBe(0);

    // And the other way round: a chat line in an embeddings batch.
    const { batch: b2 } = await createBatch(client, [embedReq("w-1", "fine"), chatReq("w-2", "wrong url")], { endpoint: "/v1/embeddings" });
    const d2 = await waitBatch(client, b2.id);
    expect(d2.status).toBe("failed");
    expect(d2.errors!.data!.map((e) => [e.line, e.code, e.param])).toEqual([[2, "invalid_url", "url"]]);
  });

  test("validation line numbers stay right across shards (a file over 4 MB) and count blank lines", async () => {
    const pad = "x".repeat(120);
    const lines: string[] = [];
    for (let i = 1; i <= 36_000; i++) {
      if (i === 3) lines.push("");
      else if (i === 10 || i === 35_000) lines.push(chatReq(`big-${i}`, pad, { model: "missing-model" }));
      else lines.push(chatReq(`big-${i}`, pad));
    }
    expect(lines.join("\n").length).toBeGreaterThan(5 << 20);
    const { batch } = await createBatch(client, lines);
    const done = await waitBatch(client, batch.id, undefined, 40_000);
    expect(done.status).toBe("failed");
    expect(done.errors!.data!.map((e) => [e.line, e.code])).toEqual([
      [10, "model_not_found"],
      [35_000, "model_not_found"],
    ]);
  });

  describe("POST /batches errors", () => {
    let batchFile: string;
    let before: string[];

    const listIds = async () => (await json(await t.api("/batches?limit=100"))).data.map((b: any) => b.id);
    const post = (body: unknown, key?: string) =>
      t.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body), key });

    beforeAll(async () => {
      batchFile = (await uploadBatchFile(client, [chatReq("p-1", "x")])).id;
      before = await listIds();
    });

    test("unknown input file → 404 with param input_file_id", async () => {
      for (const id of ["file-AAAAAAAAAAAAAAAAAAAAAAAA", "file-nope", "nope"]) {
        const res = await post({ input_file_id: id, endpoint: "/v1/chat/completions", completion_window: "24h" });
        expect(res.status).toBe(404);
        expectError(await json(res), "not_found_error", "input_file_id");
      }
    });

    test("another project's file → 404 exactly like an unknown one", async () => {
      const other = await t.createKey({ name: "other", project: "other-project" });
      const up = await uploadRaw(t, chatReq("o-1", "theirs") + "\n", "batch", "theirs.jsonl", other);
      expect(up.status).toBe(200);
      const theirs = (await json(up)).id;
      const res = await post({ input_file_id: theirs, endpoint: "/v1/chat/completions", completion_window: "24h" });
      expect(res.status).toBe(404);
      const body = await json(res);
      expectError(body, "not_found_error", "input_file_id");
      const unknown = await json(await post({ input_file_id: "file-AAAAAAAAAAAAAAAAAAAAAAAA", endpoint: "/v1/chat/completions", completion_window: "24h" }));
      expect(body.error.code).toBe(unknown.error.code);
      expect(body.error.message.replace(theirs, "ID")).toBe(unknown.error.message.replace("file-AAAAAAAAAAAAAAAAAAAAAAAA", "ID"));
      // Their own key can use it.
      const mine = await post({ input_file_id: theirs, endpoint: "/v1/chat/completions", completion_window: "24h" }, other);
      expect(mine.status).toBe(200);
    });

    test("a body that is not JSON by its content type (form, multipart, text/plain) → 400, no batch", async () => {
      const fields = { input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "24h" };
      const form = new FormData();
      for (const [k, v] of Object.entries(fields)) form.append(k, v);
      for (const init of [
        { headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(fields).toString() },
        { body: form },
        { headers: { "content-type": "text/plain" }, body: JSON.stringify(fields) },
      ]) {
        const res = await t.api("/batches", { method: "POST", ...init });
        expect(res.status).toBe(400);
        expect((await json(res)).error.message).toContain("Content-Type: application/json");
      }
      expect(await listIds()).toEqual(before);
    });

    test("a file whose purpose is not batch → 400", async () => {
      const up = await uploadRaw(t, chatReq("u-1", "x") + "\n", "user_data", "notes.jsonl");
      expect(up.status).toBe(200);
      const res = await post({ input_file_id: (await json(up)).id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      expect(res.status).toBe(400);
      expectError(await json(res), "invalid_request_error", "input_file_id");
    });

    test("a bad completion_window → 400", async () => {
      for (const w of ["0h", "169h", "0d", "8d", "24", "", "24H", "1D", " 24h", "-1h", "1.5h", "1000h", "001h", "024h", "01d", "1w", "1h30m"]) {
        const res = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: w });
        expect({ w, status: res.status }).toEqual({ w, status: 400 });
        expectError(await json(res), "invalid_request_error", "completion_window");
      }
    });

    test("a bad endpoint or missing field → 400 (never 422)", async () => {
      const cases: unknown[] = [
        { input_file_id: batchFile, endpoint: "/v1/moderations", completion_window: "24h" },
        { input_file_id: batchFile, endpoint: "/v1/responses/", completion_window: "24h" },
        { endpoint: "/v1/chat/completions", completion_window: "24h" },
        { input_file_id: batchFile, completion_window: "24h" },
        { input_file_id: batchFile, endpoint: "/v1/chat/completions" },
        { input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: 24 },
        "{not json",
        "[]",
      ];
      for (const body of cases) {
        const res = await post(body);
        expect({ body, status: res.status }).toEqual({ body, status: 400 });
        expectError(await json(res), "invalid_request_error");
      }
    });

    test("metadata over the limits → 400 naming metadata", async () => {
      const pairs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
      for (const metadata of [pairs(17), { ["k".repeat(65)]: "v" }, { k: "v".repeat(513) }, { k: 5 }, { k: { nested: "x" } }]) {
        const res = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "24h", metadata });
        expect(res.status).toBe(400);
        expectError(await json(res), "invalid_request_error", "metadata");
      }
    });

    test("none of the refused requests created a batch", async () => {
      // Only the other project's own (successful) create exists, and it is not in this project's list.
      expect(await listIds()).toEqual(before);
    });

    test("metadata that is not an object → 400, nothing created", async () => {
      const ids = await listIds();
      for (const metadata of [["a"], "text", 5, true]) {
        const res = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "24h", metadata });
        const body = await json(res);
        expect({ metadata, status: res.status, stored: body.metadata }).toEqual({ metadata, status: 400, stored: undefined });
        expectError(body, "invalid_request_error", "metadata");
      }
      expect(await listIds()).toEqual(ids);
    });

    test("metadata at the limits and any Nh from 1h to 168h are accepted", async () => {
      const pairs = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`${i}`.padEnd(64, "k"), "v".repeat(512)]));
      const res = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "168h", metadata: pairs });
      expect(res.status).toBe(200);
      const b = await json(res);
      expect(b.metadata).toEqual(pairs);
      expect(b.expires_at).toBe(b.created_at + 168 * 3600);
      const one = await json(await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "1h", unknown_field: true }));
      expect(one.expires_at).toBe(one.created_at + 3600);
      expect(one.metadata).toBeNull();
      // Characters, not UTF-16 units: 512 emoji are 512 characters.
      const emoji = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { mood: "😀".repeat(512) } });
      expect(emoji.status).toBe(200);
      const tooMany = await post({ input_file_id: batchFile, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { mood: "😀".repeat(513) } });
      expect(tooMany.status).toBe(400);
      const e = await json(emoji);
      for (const id of [b.id, one.id, e.id]) expect((await waitBatch(client, id)).status).toBe("completed");
    });
  });

  test("list: newest first, limit, after, has_more; bad limits → 400", async () => {
    // A project of its own, so the list holds exactly these batches.
    const key = await t.createKey({ name: "pager", project: "pager" });
    const pc = t.sdk(key);
    const file = await uploadBatchFile(pc, [chatReq("l-1", "x")]);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await pc.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" })).id);
    const newest = [...ids].reverse();
    const page = async (q: string) => {
      const res = await t.api(`/batches${q}`, { key });
      expect(res.status).toBe(200);
      return json(res);
    };

    const all = await page("");
    expect(Object.keys(all).sort()).toEqual(["data", "first_id", "has_more", "last_id", "object"]);
    expect(all.object).toBe("list");
    expect(all.data.map((b: any) => b.id)).toEqual(newest);
    expect(all.has_more).toBe(false);
    for (const b of all.data) expect(Object.keys(b).sort()).toEqual(BATCH_KEYS);

    const p1 = await page("?limit=2");
    expect(p1.data.map((b: any) => b.id)).toEqual(newest.slice(0, 2));
    expect([p1.first_id, p1.last_id, p1.has_more]).toEqual([newest[0], newest[1], true]);
    const p2 = await page(`?limit=2&after=${p1.last_id}`);
    expect(p2.data.map((b: any) => b.id)).toEqual(newest.slice(2, 4));
    expect(p2.has_more).toBe(true);
    const p3 = await page(`?limit=2&after=${p2.last_id}`);
    expect(p3.data.map((b: any) => b.id)).toEqual(newest.slice(4));
    expect(p3.has_more).toBe(false);
    const exact = await page(`?limit=4&after=${newest[0]}`);
    expect(exact.data.map((b: any) => b.id)).toEqual(newest.slice(1));
    expect(exact.has_more).toBe(false);
    expect(await page(`?after=${newest[4]}`)).toEqual({ object: "list", data: [], first_id: null, last_id: null, has_more: false });
    expect((await page("?limit=1")).data).toHaveLength(1);
    expect((await page("?limit=100")).data).toHaveLength(5);

    // The SDK's auto-pagination walks the same order.
    const seen: string[] = [];
    for await (const b of pc.batches.list({ limit: 2 })) seen.push(b.id);
    expect(seen).toEqual(newest);

    for (const bad of ["0", "101", "abc", "-1", "1.5", "1e2"]) {
      const res = await t.api(`/batches?limit=${bad}`, { key });
      expect({ bad, status: res.status }).toEqual({ bad, status: 400 });
      expectError(await json(res), "invalid_request_error", "limit");
    }
    for (const id of ids) await waitBatch(pc, id);
  });

  test("cancelling a batch in a final state → 409, and nothing changes", async () => {
    const { batch } = await createBatch(client, [chatReq("c-1", "done soon")]);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    const before = await json(await t.api(`/batches/${batch.id}`));
    const res = await t.api(`/batches/${batch.id}/cancel`, { method: "POST" });
    expect(res.status).toBe(409);
    expectError(await json(res), "conflict_error");
    const err = await client.batches.cancel(batch.id).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.ConflictError);
    expect(await json(await t.api(`/batches/${batch.id}`))).toEqual(before);

    // A failed one too.
    const { batch: f } = await createBatch(client, [chatReq("c-2", "x", { model: "nope" })]);
    expect((await waitBatch(client, f.id)).status).toBe("failed");
    expect((await t.api(`/batches/${f.id}/cancel`, { method: "POST" })).status).toBe(409);
  });
});

// ── a slow built-in model: progress, cancel, delete guard ────────────────

describe("slow model", () => {
  let t: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    // 50 ms per request, 4 at a time: ≈80 requests per second.
    const config = writeConfig("slow.json", { models: { "offpeak-echo": { latency_ms: 50, max_concurrency: 4 } } });
    t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2" } });
    client = t.sdk();
  });
  afterAll(async () => {
    await t?.stop();
  });

  const slowLines = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => chatReq(`${prefix}-${i}`, `${prefix} line ${i}`));

  test("request_counts move while the batch runs; the input file cannot be deleted meanwhile", async () => {
    const n = 200;
    const ids = Array.from({ length: n }, (_, i) => `prog-${i}`);
    const { file, batch } = await createBatch(client, slowLines("prog", n));
    const seen: { status: string; completed: number; failed: number }[] = [];
    let deleteChecked = false;
    const done = await pollUntil(
      async () => {
        const b = await client.batches.retrieve(batch.id);
        seen.push({ status: b.status, completed: b.request_counts!.completed, failed: b.request_counts!.failed });
        if (b.status === "in_progress" && !deleteChecked) {
          deleteChecked = true;
          const res = await t.api(`/files/${file.id}`, { method: "DELETE" });
          expect(res.status).toBe(409);
          expectError(await json(res), "conflict_error");
          expect((await client.files.retrieve(file.id)).id).toBe(file.id);
        }
        return b;
      },
      (b) => b.status === "completed",
      30_000,
      100,
    );
    expect(deleteChecked).toBe(true);
    const intermediate = seen.filter((s) => s.status === "in_progress" && s.completed > 0 && s.completed < n);
    expect(intermediate.length).toBeGreaterThan(0);
    // Never backwards.
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.completed).toBeGreaterThanOrEqual(seen[i - 1]!.completed);
    expect(done.request_counts).toEqual({ total: n, completed: n, failed: 0 });
    expectExactlyOnce(ids, await readResults(client, done.output_file_id), []);

    // Finished: the input file may go now.
    expect((await t.api(`/files/${file.id}`, { method: "DELETE" })).status).toBe(200);
  });

  test("cancel mid-run → cancelling → cancelled; unrun requests are batch_cancelled errors; exactly once", async () => {
    const n = 400;
    const ids = Array.from({ length: n }, (_, i) => `can-${i}`);
    const { batch } = await createBatch(client, slowLines("can", n));
    await pollUntil(
      () => client.batches.retrieve(batch.id),
      (b) => b.request_counts!.completed >= 20,
      20_000,
      50,
      "some requests to complete",
    );
    const cancelling = await client.batches.cancel(batch.id);
    expect(cancelling.status).toBe("cancelling");
    expect(Number.isInteger(cancelling.cancelling_at)).toBe(true);
    expect(cancelling.cancelled_at).toBeNull();
    // Cancelling again while cancelling is not an error.
    const again = await t.api(`/batches/${batch.id}/cancel`, { method: "POST" });
    expect(again.status).toBe(200);
    expect(["cancelling", "cancelled"]).toContain((await json(again)).status);

    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("cancelled");
    expect(Number.isInteger(done.cancelled_at)).toBe(true);
    expect(done.cancelling_at).toBe(cancelling.cancelling_at);
    expect(done.cancelled_at!).toBeGreaterThanOrEqual(done.cancelling_at!);
    expect(Number.isInteger(done.in_progress_at)).toBe(true);
    expect(done.completed_at).toBeNull();
    expect(done.failed_at).toBeNull();
    expect(done.expired_at).toBeNull();

    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(ids, out, err);
    expectCountsMatchFiles(done, out, err);
    expect(out.length).toBeGreaterThanOrEqual(20);
    expect(err.length).toBeGreaterThan(0);
    for (const l of out) expect(l.response!.status_code).toBe(200);
    for (const l of err) {
      expectLineShape(l);
      expect(l.response).toBeNull();
      expect(l.error!.code).toBe("batch_cancelled");
    }
    expect((await client.files.retrieve(done.error_file_id!)).filename).toBe(`${batch.id}_error.jsonl`);
    // Usage covers exactly the requests that ran.
    expect(done.usage!.input_tokens).toBe(sum(out, (u) => u.prompt_tokens));

    expect((await t.api(`/batches/${batch.id}/cancel`, { method: "POST" })).status).toBe(409);
  });

  test("cancel right after create (while validating) → cancelled, exactly once", async () => {
    const n = 150;
    const ids = Array.from({ length: n }, (_, i) => `early-${i}`);
    const { batch } = await createBatch(client, slowLines("early", n));
    const c = await client.batches.cancel(batch.id);
    expect(c.status).toBe("cancelling");
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("cancelled");
    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(ids, out, err);
    expectCountsMatchFiles(done, out, err);
    expect(err.length).toBeGreaterThan(0);
    for (const l of err) expect(l.error!.code).toBe("batch_cancelled");
  });
});

// ── expiry ───────────────────────────────────────────────────────────────

describe("expiry", () => {
  let t: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    const config = writeConfig("expiry.json", { models: { "offpeak-echo": { latency_ms: 50, max_concurrency: 4 } } });
    // One "h" of completion_window lasts 2 s here.
    t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2", OFFPEAK_BATCH_HOUR_SECONDS: "2" } });
    client = t.sdk();
  });
  afterAll(async () => {
    await t?.stop();
  });

  test("a batch past its completion window → expired; unfinished lines are batch_expired errors; exactly once", async () => {
    const n = 400; // ≈5 s of work for a 2 s window
    const ids = Array.from({ length: n }, (_, i) => `exp-${i}`);
    const { batch } = await createBatch(
      client,
      ids.map((id) => chatReq(id, `text of ${id}`)),
      { window: "1h" },
    );
    expect(batch.expires_at).toBe(batch.created_at + 2);
    const done = await waitBatch(client, batch.id, undefined, 30_000);
    expect(done.status).toBe("expired");
    expect(Number.isInteger(done.expired_at)).toBe(true);
    expect(done.expired_at!).toBeGreaterThanOrEqual(done.expires_at!);
    expect(done.completed_at).toBeNull();
    expect(done.cancelled_at).toBeNull();
    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(ids, out, err);
    expectCountsMatchFiles(done, out, err);
    expect(err.length).toBeGreaterThan(0);
    for (const l of out) expect(l.response!.status_code).toBe(200);
    for (const l of err) {
      expectLineShape(l);
      expect(l.response).toBeNull();
      expect(l.error!.code).toBe("batch_expired");
    }
    expect((await t.api(`/batches/${batch.id}/cancel`, { method: "POST" })).status).toBe(409);
  });
});

// ── an upstream: retries, non-retryable errors ───────────────────────────

describe("fake upstream", () => {
  let fake: FakeUpstream;
  let t: TestServer;
  let client: OpenAI;
  const MAX_ATTEMPTS = 4;

  beforeAll(async () => {
    fake = await startFakeUpstream({ models: ["fake-chat", "fake-embed"], latencyMs: 2 });
    t = await startTestServer({
      env: {
        OFFPEAK_UPSTREAM_URL: fake.baseUrl,
        OFFPEAK_BATCH_RETRY_BASE_MS: "5",
        OFFPEAK_BATCH_MAX_ATTEMPTS: String(MAX_ATTEMPTS),
        OFFPEAK_BATCH_WORKERS: "2",
      },
    });
    client = t.sdk();
  });
  afterAll(async () => {
    await t?.stop();
    await fake?.stop();
  });

  const upLine = (id: string, text: string, body: Record<string, unknown> = {}) => chatReq(id, text, { model: "fake-chat", ...body });

  test("the upstream's models are discovered", async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toContain("fake-chat");
    expect(ids).toContain("fake-embed");
  });

  test("retryable failures (500, 429 + retry-after, 408, dropped connections) are retried until they succeed; an always-503 ends as its error", async () => {
    const flaky = inShare(0.4);
    fake.plan = plans.first(
      plans.always({ status: 503 }, (c) => c === "rt always 503"),
      plans.always("close", (c) => c === "rt always closed"),
      plans.failFirst(2, { status: 500 }, (c) => c.startsWith("rt 500 ") && flaky(c)),
      plans.failFirst(1, { status: 429, retryAfter: 1 }, (c) => c.startsWith("rt 429 ")),
      plans.failFirst(1, { status: 408 }, (c) => c.startsWith("rt 408 ")),
      plans.failFirst(1, "close", (c) => c.startsWith("rt close ")),
    );
    const lines: string[] = [];
    const contents = new Map<string, string>();
    const add = (id: string, text: string) => {
      contents.set(id, text);
      lines.push(upLine(id, text));
    };
    for (let i = 0; i < 100; i++) add(`f500-${i}`, `rt 500 ${i}`);
    for (let i = 0; i < 3; i++) add(`f429-${i}`, `rt 429 ${i}`);
    for (let i = 0; i < 5; i++) add(`f408-${i}`, `rt 408 ${i}`);
    for (let i = 0; i < 5; i++) add(`fclose-${i}`, `rt close ${i}`);
    add("always-503", "rt always 503");
    add("always-closed", "rt always closed");
    const flakyCount = [...contents.values()].filter((c) => c.startsWith("rt 500 ") && flaky(c)).length;
    expect(flakyCount).toBeGreaterThan(10); // the plan really fails a share
    expect(flakyCount).toBeLessThan(100);

    const { batch } = await createBatch(client, lines);
    const done = await waitBatch(client, batch.id, undefined, 30_000);
    expect(done.status).toBe("completed");
    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce([...contents.keys()], out, err);
    expectCountsMatchFiles(done, out, err);
    expect(err.map((l) => l.custom_id).sort()).toEqual(["always-503", "always-closed"]);

    for (const l of out) {
      expectLineShape(l);
      expect(l.response!.status_code).toBe(200);
      expect(l.response!.body.object).toBe("chat.completion");
      expect(l.response!.body.model).toBe("fake-chat");
      expect(l.response!.body.choices[0].message.content).toBe(contents.get(l.custom_id)!);
    }
    const e503 = err.find((l) => l.custom_id === "always-503")!;
    expectLineShape(e503);
    expect(e503.error).toBeNull();
    expect(e503.response!.status_code).toBe(503);
    expectError(e503.response!.body, "server_error");
    const eClosed = err.find((l) => l.custom_id === "always-closed")!;
    expectLineShape(eClosed);
    expect(eClosed.response).toBeNull();
    expect(eClosed.error!.code).toBe("upstream_unreachable");

    // How many times each request reached the upstream.
    for (const [id, c] of contents) {
      let want = 1;
      if (c.startsWith("rt 500 ") && flaky(c)) want = 3;
      else if (/^rt (429|408|close) /.test(c)) want = 2;
      else if (c.startsWith("rt always")) want = MAX_ATTEMPTS;
      expect({ id, sent: fake.counts.get(c) }).toEqual({ id, sent: want });
    }

    expect(done.usage!.input_tokens).toBe(sum(out, (u) => u.prompt_tokens));
    expect(done.usage!.output_tokens).toBe(sum(out, (u) => u.completion_tokens));
  });

  test("a 400 (or 404) from the upstream is not retried and keeps the upstream's body", async () => {
    const upstreamError = { error: { message: "temperature is out of range", type: "invalid_request_error", param: "temperature", code: "invalid_value" } };
    fake.plan = plans.always({ status: 400, body: upstreamError }, (c) => c.startsWith("nr 400 "));
    const lines = [
      upLine("nr-400-a", "nr 400 a"),
      upLine("nr-400-b", "nr 400 b"),
      upLine("nr-ok", "nr fine"),
      // A model the server knows but the upstream does not: the upstream's 404.
      JSON.stringify({ custom_id: "nr-404", method: "POST", url: "/v1/chat/completions", body: { model: "fake-embed", messages: [{ role: "user", content: "nr 404" }] } }),
    ];
    fake.models = ["fake-chat"];
    try {
      const { batch } = await createBatch(client, lines);
      const done = await waitBatch(client, batch.id);
      expect(done.status).toBe("completed");
      expect(done.request_counts).toEqual({ total: 4, completed: 1, failed: 3 });
      const out = await readResults(client, done.output_file_id);
      const err = await readResults(client, done.error_file_id);
      expectExactlyOnce(["nr-400-a", "nr-400-b", "nr-ok", "nr-404"], out, err);
      for (const l of err) {
        expectLineShape(l);
        expect(l.error).toBeNull();
        if (l.custom_id === "nr-404") expect(l.response!.status_code).toBe(404);
        else {
          expect(l.response!.status_code).toBe(400);
          expect(l.response!.body).toEqual(upstreamError);
        }
      }
      for (const c of ["nr 400 a", "nr 400 b", "nr fine", "nr 404"]) expect({ c, sent: fake.counts.get(c) }).toEqual({ c, sent: 1 });
    } finally {
      fake.models = ["fake-chat", "fake-embed"];
    }
  });

  test("an embeddings batch through the upstream", async () => {
    fake.plan = plans.failFirst(1, { status: 502 }, (c) => c === "emb flaky");
    const lines = [
      embedReq("ue-1", "emb one", { model: "fake-embed" }),
      embedReq("ue-2", "emb flaky", { model: "fake-embed" }),
      embedReq("ue-3", "emb three", { model: "fake-embed", dimensions: 4 }),
    ];
    const { batch } = await createBatch(client, lines, { endpoint: "/v1/embeddings" });
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    const out = await readResults(client, done.output_file_id);
    expectExactlyOnce(["ue-1", "ue-2", "ue-3"], out, []);
    const by = new Map(out.map((l) => [l.custom_id, l.response!.body]));
    expect(by.get("ue-1").object).toBe("list");
    expect(by.get("ue-3").data[0].embedding).toHaveLength(4);
    expect(fake.counts.get("emb flaky")).toBe(2);
    expect(fake.counts.get("emb one")).toBe(1);
    expect(done.usage!.input_tokens).toBe(sum(out, (u) => u.prompt_tokens));
  });
});

describe("upstream failures without an HTTP answer", () => {
  let t: TestServer;
  let client: OpenAI;
  let slow: FakeUpstream;

  beforeAll(async () => {
    const port = freePort();
    // Answers "slow …" after 3 s, everything else at once.
    slow = await startFakeUpstream({ models: ["slow-chat"], latencyMs: (c) => (c.startsWith("slow ") ? 3000 : 0) });
    // Discovery would fail against a closed port, so the models are named in config.
    const config = writeConfig("dead.json", {
      upstreams: [
        { name: "dead", base_url: `http://127.0.0.1:${port}/v1`, models: ["dead-chat"], timeout_s: 5 },
        // A second to answer: on a loaded machine a shorter limit can end an attempt before the engine has read it (then it counts two, not three).
        { name: "slow", base_url: slow.baseUrl, models: ["slow-chat"], timeout_s: 1 },
      ],
    });
    t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_RETRY_BASE_MS: "5", OFFPEAK_BATCH_MAX_ATTEMPTS: "3", OFFPEAK_BATCH_WORKERS: "1" } });
    client = t.sdk();
  });
  afterAll(async () => {
    await t?.stop();
    await slow?.stop();
  });

  test("connection refused: the upstream is down, so its lines wait (none fails); a cancel ends them as batch_cancelled", async () => {
    const ids = ["dead-1", "dead-2", "dead-3", "dead-4"];
    const { batch } = await createBatch(
      client,
      ids.map((id) => chatReq(id, `to nowhere ${id}`, { model: "dead-chat" })),
    );
    // docs/CONTRACT.md §11: an outage is not the lines' failure. Give them time to have
    // burnt every attempt under the old rules (3 attempts, 5 ms backoff).
    await Bun.sleep(1500);
    const running = await client.batches.retrieve(batch.id);
    expect(running.status).toBe("in_progress");
    expect(running.request_counts).toEqual({ total: 4, completed: 0, failed: 0 });
    await client.batches.cancel(batch.id);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("cancelled");
    expect(done.request_counts).toEqual({ total: 4, completed: 0, failed: 4 });
    expect(done.output_file_id).toBeNull();
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(ids, [], err);
    for (const l of err) {
      expectLineShape(l);
      expect(l.response).toBeNull();
      expect(l.error!.code).toBe("batch_cancelled");
    }
    expect(done.usage!.total_tokens).toBe(0);
  });

  test("an upstream that does not answer within timeout_s is retried up to max attempts, then an error line", async () => {
    const { batch } = await createBatch(client, [chatReq("to-slow", "slow one", { model: "slow-chat" }), chatReq("to-fast", "fast one", { model: "slow-chat" })]);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 2, completed: 1, failed: 1 });
    const out = await readResults(client, done.output_file_id);
    const err = await readResults(client, done.error_file_id);
    expectExactlyOnce(["to-slow", "to-fast"], out, err);
    expect(err[0]!.custom_id).toBe("to-slow");
    expectLineShape(err[0]!);
    expect(err[0]!.response).toBeNull();
    expect(err[0]!.error!.code).toBe("upstream_unreachable");
    expect(slow.counts.get("slow one")).toBe(3);
    expect(slow.counts.get("fast one")).toBe(1);
  });
});

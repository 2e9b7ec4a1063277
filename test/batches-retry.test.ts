// POST /batches/{id}/retry (docs/CONTRACT.md §12): a new input file of the failed lines'
// original requests, a new batch on it, metadata.retry_of; 409s.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { chatReq, createBatch, readResults, waitBatch } from "./helpers/batches";
import { configWriter, expectError, json } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let client: OpenAI;
const cfg = configWriter("offpeak-retry-");

beforeAll(async () => {
  const config = cfg.write("slow.json", { models: { "offpeak-echo": { latency_ms: 30, max_concurrency: 2 } } });
  t = await startTestServer({ argv: ["--config", config] });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  cfg.cleanup();
});

const retry = (id: string, key?: string) => t.api(`/batches/${id}/retry`, { method: "POST", key });

describe("POST /batches/{id}/retry", () => {
  test("the new input holds exactly the failed lines' original requests, in input order; same endpoint and window; metadata + retry_of", async () => {
    // Every 3rd line is refused by the model (n: 0 → 400): 10 of 30 fail.
    const lines = Array.from({ length: 30 }, (_, i) => (i % 3 === 1 ? chatReq(`r-${i}`, `bad ${i}`, { n: 0, temperature: 0.5 }) : chatReq(`r-${i}`, `good ${i}`)));
    // CRLF line endings and a blank line are kept out of the retry file (only request lines go in).
    const { batch } = await createBatch(client, lines, { metadata: { team: "a" }, window: "48h" });
    const done = await waitBatch(client, batch.id);
    expect(done.request_counts).toEqual({ total: 30, completed: 20, failed: 10 });

    const res = await retry(batch.id);
    expect(res.status).toBe(200);
    const again = await json(res);
    expect(again).toMatchObject({ object: "batch", status: "validating", endpoint: done.endpoint, completion_window: "48h", metadata: { team: "a", retry_of: batch.id } });
    expect(again.id).not.toBe(batch.id);
    expect(again.input_file_id).not.toBe(batch.input_file_id);
    const file = await client.files.retrieve(again.input_file_id);
    expect(file).toMatchObject({ purpose: "batch", filename: `${batch.id}_retry.jsonl`, status: "processed" });
    const text = await (await client.files.content(again.input_file_id)).text();
    const expected = lines.filter((_, i) => i % 3 === 1);
    expect(text).toBe(expected.join("\n") + "\n");
    expect(file.bytes).toBe(Buffer.byteLength(text));

    // The new batch runs: the same 10 lines fail again, the same way.
    const second = await waitBatch(client, again.id);
    expect(second.request_counts).toEqual({ total: 10, completed: 0, failed: 10 });
    const errs = await readResults(client, second.error_file_id);
    expect(errs.map((l) => l.custom_id).sort()).toEqual(expected.map((l) => JSON.parse(l).custom_id).sort());
  });

  test("cancelled lines (batch_cancelled) are retried too", async () => {
    const lines = Array.from({ length: 200 }, (_, i) => chatReq(`c-${i}`, `line ${i}`));
    const { batch } = await createBatch(client, lines);
    await Bun.sleep(150);
    await client.batches.cancel(batch.id);
    const done = await waitBatch(client, batch.id);
    expect(done.status).toBe("cancelled");
    expect(done.request_counts!.failed).toBeGreaterThan(0);
    const errs = await readResults(client, done.error_file_id);
    const again = await json(await retry(batch.id));
    const text = await (await client.files.content(again.input_file_id)).text();
    const ids = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l).custom_id);
    expect(ids.sort()).toEqual(errs.map((l) => l.custom_id).sort());
    expect(ids.length).toBe(done.request_counts!.failed);
    await client.batches.cancel(again.id);
  });

  test("409 when nothing failed, when the batch failed validation, and while it runs; nothing is created", async () => {
    const ok = (await createBatch(client, [chatReq("ok-1", "fine")])).batch;
    await waitBatch(client, ok.id);
    const invalid = (await createBatch(client, [chatReq("v-1", "x", { model: "no-such-model" })])).batch;
    expect((await waitBatch(client, invalid.id)).status).toBe("failed");
    const running = (await createBatch(client, Array.from({ length: 100 }, (_, i) => chatReq(`run-${i}`, `x ${i}`)))).batch;

    const count = async () => ({ files: (await client.files.list()).data.length, batches: (await t.api("/batches?limit=100").then(json)).data.length });
    const before = await count();
    await expectError(await retry(ok.id), 409, { type: "conflict_error", code: "invalid_state" });
    await expectError(await retry(invalid.id), 409, { code: "invalid_state" });
    await expectError(await retry(running.id), 409, { code: "invalid_state" });
    expect(await count()).toEqual(before);
    await client.batches.cancel(running.id);
    await waitBatch(client, running.id);
  });

  test("401, 403 (needs batches:write), 404 for unknown and other projects' batches", async () => {
    const lines = [chatReq("a-1", "x", { n: 0 })];
    const { batch } = await createBatch(client, lines);
    await waitBatch(client, batch.id);
    await expectError(await retry(batch.id, null as unknown as string), 401);
    const readOnly = await t.createKey({ scopes: ["batches:read", "files:read"] });
    await expectError(await retry(batch.id, readOnly), 403, { type: "permission_error" });
    const other = await t.createKey({ project: "other" });
    await expectError(await retry(batch.id, other), 404, { type: "not_found_error" });
    await expectError(await retry(`batch_${"z".repeat(24)}`), 404);
  });
});

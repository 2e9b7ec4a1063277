// GET /batches/{id}/output?kind=output|error (docs/CONTRACT.md §12): partial results while
// the batch runs (always a subset of the final file's lines), the final
// files' exact bytes after it ends.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { configWriter, expectError } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let client: OpenAI;
const cfg = configWriter("offpeak-output-");

beforeAll(async () => {
  // 4 lines at a time, 40 ms each: 400 lines take ≈4 s.
  const config = cfg.write("slow.json", { models: { "offpeak-echo": { latency_ms: 40, max_concurrency: 4 } } });
  t = await startTestServer({ argv: ["--config", config] });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  cfg.cleanup();
});

const output = (id: string, kind?: string, key?: string) => t.api(`/batches/${id}/output${kind === undefined ? "" : `?kind=${kind}`}`, { key });
const lines = (text: string) => text.split("\n").filter((l) => l !== "");

describe("GET /batches/{id}/output", () => {
  test("while running: complete JSON lines, a growing subset of the final file's lines; after the end: the file's exact bytes", async () => {
    // Every 5th line is refused by the model (n: 0): both kinds get lines.
    const reqs = Array.from({ length: 400 }, (_, i) => (i % 5 === 0 ? chatReq(`o-${i}`, `bad ${i}`, { n: 0 }) : chatReq(`o-${i}`, `good ${i}`)));
    const { batch } = await createBatch(client, reqs);
    const snapshots: { out: string[]; err: string[] }[] = [];
    for (let k = 0; k < 40; k++) {
      const b = await client.batches.retrieve(batch.id);
      if (["completed", "failed", "expired", "cancelled"].includes(b.status)) break;
      const o = await output(batch.id);
      expect(o.status).toBe(200);
      expect(o.headers.get("content-type")).toBe("application/jsonl");
      const text = await o.text();
      // Only whole lines: the body ends with a newline (or is empty).
      expect(text === "" || text.endsWith("\n")).toBe(true);
      const e = await output(batch.id, "error");
      const etext = await e.text();
      expect(etext === "" || etext.endsWith("\n")).toBe(true);
      snapshots.push({ out: lines(text), err: lines(etext) });
      await Bun.sleep(100);
    }
    const done = await waitBatch(client, batch.id);
    expect(done.request_counts).toEqual({ total: 400, completed: 320, failed: 80 });
    // At least one snapshot was partial (the batch was seen running, part done).
    expect(snapshots.some((s) => s.out.length > 0 && s.out.length < 320)).toBe(true);

    const finalOut = await (await client.files.content(done.output_file_id!)).text();
    const finalErr = await (await client.files.content(done.error_file_id!)).text();
    const outSet = new Set(lines(finalOut));
    const errSet = new Set(lines(finalErr));
    let prevOut = 0;
    for (const s of snapshots) {
      for (const l of s.out) expect(outSet.has(l)).toBe(true);
      for (const l of s.err) expect(errSet.has(l)).toBe(true);
      // Never fewer lines than an earlier look.
      expect(s.out.length).toBeGreaterThanOrEqual(prevOut);
      prevOut = s.out.length;
      for (const l of s.out) expect(JSON.parse(l).response.status_code).toBe(200);
    }
    // After the end: the same bytes as the files.
    const o = await output(batch.id, "output");
    // With Content-Length, whichever storage holds it (src/storage/sized.ts).
    expect(o.headers.get("content-length")).toBe(String(Buffer.byteLength(finalOut)));
    expect(await o.text()).toBe(finalOut);
    expect(await (await output(batch.id, "error")).text()).toBe(finalErr);
    expect(await (await output(batch.id)).text()).toBe(finalOut);
  });

  test("none yet: an empty 200 (validating, or a batch with no errors after the end)", async () => {
    const { batch } = await createBatch(client, [chatReq("e-1", "one"), chatReq("e-2", "two")]);
    const early = await output(batch.id, "error");
    expect(early.status).toBe(200);
    expect(await early.text()).toBe("");
    const done = await waitBatch(client, batch.id);
    expect(done.error_file_id).toBeNull();
    const none = await output(batch.id, "error");
    expect(none.status).toBe(200);
    expect(none.headers.get("content-type")).toBe("application/jsonl");
    expect(await none.text()).toBe("");
  });

  test("kind other than output|error: 400 naming kind; 401, 403 (batches:read), 404", async () => {
    const { batch } = await createBatch(client, [chatReq("k-1", "x")]);
    await expectError(await output(batch.id, "everything"), 400, { param: "kind", code: "invalid_value" });
    await expectError(await output(batch.id, undefined, null as unknown as string), 401);
    const noRead = await t.createKey({ scopes: ["batches:write", "files:read"] });
    await expectError(await output(batch.id, undefined, noRead), 403, { type: "permission_error" });
    const other = await t.createKey({ project: "another" });
    await expectError(await output(batch.id, undefined, other), 404, { type: "not_found_error" });
    await expectError(await output(`batch_${"q".repeat(24)}`), 404);
    await waitBatch(client, batch.id);
  });
});

// final-state invariants of docs/CONTRACT.md §5.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
});

describe("final states", () => {
  test("a batch that failed validation still has completed + failed = total", async () => {
    const client = t.sdk();
    const { batch } = await createBatch(client, [chatReq("a", "ok"), chatReq("b", "bad", { model: "no-such-model" }), chatReq("c", "ok")]);
    const done = await waitBatch(client, batch.id, undefined, 4000);
    expect(done.status).toBe("failed");
    const c = done.request_counts!;
    expect({ total: c.total, completedPlusFailed: c.completed + c.failed }).toEqual({ total: c.completed + c.failed, completedPlusFailed: c.completed + c.failed });
  });
});

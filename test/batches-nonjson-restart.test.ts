// a non-JSON 2xx answer written to a part file makes the shard
// unrecoverable after a checkpoint + restart (recoverParts JSON.parse throws,
// the shard is released and re-dispatched forever).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { chatReq, createBatch, pollUntil, sleep } from "./helpers/batches";
import { freshDataDir, startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

let up: ReturnType<typeof Bun.serve>;
const dataDir = freshDataDir();
beforeAll(() => {
  up = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path.endsWith("/models")) return Response.json({ object: "list", data: [{ id: "raw-chat", object: "model", created: 1, owned_by: "x" }] });
      const body = (await req.json()) as any;
      const text = body.messages[0].content as string;
      if (text !== "fast") await Bun.sleep(200);
      return new Response("OK", { status: 200 });
    },
  });
});
afterAll(() => {
  up?.stop(true);
  rmSync(dataDir, { recursive: true, force: true });
});

describe("restart after a non-JSON 2xx", () => {
  test("the batch still finishes after a SIGTERM-style checkpoint and restart", async () => {
    // The upstream's concurrency is adaptive (starts at 8 and grows): 299 lines of 200 ms take a few seconds.
    const env = { OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${up.port}/v1`, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_MAX_ATTEMPTS: "1" };
    const a: TestServer = await startTestServer({ env, dataDir });
    const lines = [chatReq("f-0", "fast", { model: "raw-chat" })];
    for (let i = 1; i < 300; i++) lines.push(chatReq(`s-${i}`, `slow ${i}`, { model: "raw-chat" }));
    const { batch } = await createBatch(a.sdk(), lines);
    await pollUntil(() => a.sdk().batches.retrieve(batch.id), (b) => b.status === "in_progress", 3000);
    await sleep(200);
    await a.stop(); // checkpoint
    const b: TestServer = await startTestServer({ env, dataDir });
    try {
      const done = await pollUntil(() => b.sdk().batches.retrieve(batch.id), (x) => ["completed", "failed", "expired", "cancelled"].includes(x.status), 40_000).catch((e) => String(e).slice(0, 300));
      expect(typeof done === "string" ? done : done.status).toBe("completed");
    } finally {
      await b.stop();
    }
  }, SCENARIO_MS);
});

// a model discovered after the batch Workers were spawned.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chatReq, createBatch, pollUntil, sleep } from "./helpers/batches";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";
import { freePort } from "./helpers/env";

let t: TestServer;
let up: ReturnType<typeof Bun.serve> | null = null;
let port = 0;
beforeAll(async () => {
  port = freePort();
  // The upstream is down when offpeak starts: discovery finds no models.
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${port}/v1`, OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  up?.stop(true);
});

describe("late-discovered upstream model", () => {
  test("a batch on a model discovered after start runs (Workers learn the model)", async () => {
    await sleep(300); // the runner's first ticks spawn the Worker pool with the models known now (none)
    up = Bun.serve({
      port,
      hostname: "127.0.0.1",
      async fetch(req) {
        const path = new URL(req.url).pathname;
        if (req.method === "GET" && path.endsWith("/models")) return Response.json({ object: "list", data: [{ id: "late-chat", object: "model", created: 1, owned_by: "x" }] });
        return Response.json({ id: "chatcmpl-x", object: "chat.completion", created: 1, model: "late-chat", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      },
    });
    await t.server.ctx.registry.discover(); // what the 60 s sweep (or GET /status) does
    const client = t.sdk();
    expect((await client.models.list()).data.map((m) => m.id)).toContain("late-chat");
    const { batch } = await createBatch(client, [chatReq("l-1", "hi", { model: "late-chat" })]);
    const done = await pollUntil(() => client.batches.retrieve(batch.id), (b) => ["completed", "failed", "expired", "cancelled"].includes(b.status), 20_000).catch((e) => String(e).slice(0, 200));
    expect(typeof done === "string" ? done : done.status).toBe("completed");
    await client.batches.cancel(batch.id).catch(() => {});
  }, SCENARIO_MS);
});

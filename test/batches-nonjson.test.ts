// an upstream that answers 2xx with a body that is not JSON.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let up: ReturnType<typeof Bun.serve>;
beforeAll(async () => {
  up = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path.endsWith("/models"))
        return Response.json({ object: "list", data: ["raw-chat", "bare-chat"].map((id) => ({ id, object: "model", created: 1, owned_by: "x" })) });
      const body = (await req.json()) as { model: string };
      // An engine that answers properly but sends no x-request-id.
      if (body.model === "bare-chat")
        return Response.json({ id: "chatcmpl-bare", object: "chat.completion", created: 1, model: "bare-chat", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }] });
      // A proxy / misconfigured engine answering 200 with plain text.
      return new Response("OK", { status: 200, headers: { "content-type": "text/plain" } });
    },
  });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${up.port}/v1`, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_MAX_ATTEMPTS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  up?.stop(true);
});

describe("upstream 2xx with a non-JSON body", () => {
  test("every line of the output file is valid JSON", async () => {
    const client = t.sdk();
    const { batch } = await createBatch(client, [chatReq("r-1", "hi", { model: "raw-chat" })]);
    const done = await waitBatch(client, batch.id, undefined, 4000);
    const fileId = done.output_file_id ?? done.error_file_id;
    const text = await (await client.files.content(fileId!)).text();
    const bad = text.split("\n").filter((l) => l !== "").filter((l) => {
      try {
        JSON.parse(l);
        return false;
      } catch {
        return true;
      }
    });
    expect({ status: done.status, bad }).toEqual({ status: done.status, bad: [] });
    // Not an answer: the error file, response null, an error saying why (docs/CONTRACT.md §5: only 2xx answers go to the output).
    expect(done.output_file_id).toBeNull();
    expect(text.trim().split("\n").map((l) => JSON.parse(l))).toEqual([
      { id: expect.stringMatching(/^batch_req_/), custom_id: "r-1", response: null, error: { code: "upstream_invalid_response", message: expect.stringContaining("not JSON: OK") } },
    ]);
  });

  test("an answer without x-request-id still gets a request_id in its line (ours)", async () => {
    const client = t.sdk();
    const { batch } = await createBatch(client, [chatReq("b-1", "hi", { model: "bare-chat" })]);
    const done = await waitBatch(client, batch.id, undefined, 4000);
    const line = JSON.parse((await (await client.files.content(done.output_file_id!)).text()).trim());
    expect(line.response.status_code).toBe(200);
    expect(line.response.request_id).toMatch(/^req_[0-9A-Za-z]{24}$/);
  });
});

// GET /batches/{id}/events (docs/CONTRACT.md §12): the record at once, again on changes of
// status or request_counts, keep-alives, closed after the final state; one
// reader however many watchers.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { batchEventsOf } from "../src/batches/events";
import { FINAL, chatReq, createBatch, waitBatch } from "./helpers/batches";
import { configWriter, expectError, sseReader } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let client: OpenAI;
const cfg = configWriter("offpeak-events-");

beforeAll(async () => {
  // A slow echo (4 at a time, 40 ms each): a 120-line batch runs ≈1.2 s.
  const config = cfg.write("slow.json", { models: { "offpeak-echo": { latency_ms: 40, max_concurrency: 4 } } });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_SSE_KEEPALIVE_MS: "300" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  cfg.cleanup();
});

interface BatchEvent {
  event: string | null;
  batch: any;
}

/** Every event of the stream until it closes (keep-alive comments counted apart). */
async function readEvents(res: Response): Promise<{ events: BatchEvent[]; keepAlives: number; raw: string }> {
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type") ?? "").toMatch(/^text\/event-stream/);
  const r = sseReader(res);
  const events: BatchEvent[] = [];
  let keepAlives = 0;
  for (let e = await r.next(); e !== null; e = await r.next()) {
    if (e.data === null) {
      if (e.comments.includes("keep-alive")) keepAlives++;
      continue;
    }
    events.push({ event: null, batch: JSON.parse(e.data) });
  }
  // Every event block names its type.
  const blocks = r.raw.split("\n\n").filter((b) => b.includes("data:"));
  for (const b of blocks) expect(b.startsWith("event: batch\ndata: ")).toBe(true);
  return { events, keepAlives, raw: r.raw };
}

const lines = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => chatReq(`${prefix}-${i}`, `hello ${prefix} ${i}`));

describe("GET /batches/{id}/events", () => {
  test("a running batch: the record at once, counts that never go back, the final record last, then the stream closes", async () => {
    const { batch } = await createBatch(client, lines(120, "ev"));
    const res = await t.api(`/batches/${batch.id}/events`);
    const { events } = await readEvents(res);
    expect(events.length).toBeGreaterThanOrEqual(3);
    expect(events[0]!.batch.id).toBe(batch.id);
    // Every event is a full batch record.
    for (const e of events) expect(e.batch.object).toBe("batch");
    const last = events[events.length - 1]!.batch;
    expect(FINAL).toContain(last.status);
    expect(last.status).toBe("completed");
    expect(last.request_counts).toEqual({ total: 120, completed: 120, failed: 0 });
    // Only the last event is final, and done counts never decrease.
    for (const e of events.slice(0, -1)) expect(FINAL).not.toContain(e.batch.status);
    for (let i = 1; i < events.length; i++) {
      const a = events[i - 1]!.batch.request_counts;
      const b = events[i]!.batch.request_counts;
      expect(b.completed + b.failed).toBeGreaterThanOrEqual(a.completed + a.failed);
    }
    // Some events in between show progress (not only the first and the last).
    expect(events.some((e) => e.batch.status === "in_progress" && e.batch.request_counts.completed > 0 && e.batch.request_counts.completed < 120)).toBe(true);
    // Consecutive events differ (an event is sent on a change, not on a timer).
    for (let i = 1; i < events.length; i++) expect(JSON.stringify(events[i]!.batch)).not.toBe(JSON.stringify(events[i - 1]!.batch));
    // And the record equals what GET answers now.
    expect(last).toEqual(JSON.parse(JSON.stringify(await client.batches.retrieve(batch.id))));
  });

  test("a batch already final: one event, then close", async () => {
    const { batch } = await createBatch(client, lines(3, "fin"));
    await waitBatch(client, batch.id);
    const { events } = await readEvents(await t.api(`/batches/${batch.id}/events`));
    expect(events).toHaveLength(1);
    expect(events[0]!.batch.status).toBe("completed");
  });

  test("a cancelled batch ends the stream with the cancelled record", async () => {
    const { batch } = await createBatch(client, lines(300, "cx"));
    const res = await t.api(`/batches/${batch.id}/events`);
    const reading = readEvents(res);
    await Bun.sleep(300);
    // The cancel answers "cancelling"; the stream may coalesce that state
    // away (events are throttled) when the drain ends within the throttle.
    expect((await client.batches.cancel(batch.id)).status).toBe("cancelling");
    const { events } = await reading;
    const statuses = events.map((e) => e.batch.status);
    expect(statuses[statuses.length - 1]).toBe("cancelled");
  });

  test("keep-alive comments while nothing changes", async () => {
    // A batch that waits: its model is slow enough that counts do not move for a while.
    const slow = cfg.write("slower.json", { models: { "offpeak-echo": { latency_ms: 2000, max_concurrency: 1 } } });
    const s = await startTestServer({ argv: ["--config", slow], env: { OFFPEAK_SSE_KEEPALIVE_MS: "200" } });
    try {
      const c = s.sdk();
      const { batch } = await createBatch(c, [chatReq("slow-1", "one"), chatReq("slow-2", "two")]);
      const res = await s.api(`/batches/${batch.id}/events`);
      const r = sseReader(res);
      const first = await r.next();
      expect(first?.data).toBeTruthy();
      let comments = 0;
      for (let i = 0; i < 20 && comments < 2; i++) {
        const e = await r.next();
        if (e?.data === null && e.comments.includes("keep-alive")) comments++;
      }
      expect(comments).toBe(2);
      await r.cancel();
      await c.batches.cancel(batch.id);
    } finally {
      await s.stop();
    }
  });

  test("many watchers share one reader; all get the final record; a watcher that leaves is dropped", async () => {
    const { batch } = await createBatch(client, lines(80, "many"));
    const N = 50;
    const streams = await Promise.all(Array.from({ length: N }, () => t.api(`/batches/${batch.id}/events`)));
    // One that leaves early.
    const leaver = sseReader(await t.api(`/batches/${batch.id}/events`));
    await leaver.next();
    await leaver.cancel();
    const results = await Promise.all(streams.map((r) => readEvents(r)));
    for (const { events } of results) {
      expect(events[events.length - 1]!.batch.status).toBe("completed");
      expect(events[events.length - 1]!.batch.request_counts).toEqual({ total: 80, completed: 80, failed: 0 });
    }
    // Nothing is left watching once the batch is final.
    expect(batchEventsOf(t.server.ctx).watchers).toBe(0);
  });

  test("401 without a key, 403 without batches:read, 404 for an unknown or another project's batch", async () => {
    const { batch } = await createBatch(client, lines(2, "auth"));
    await expectError(await t.api(`/batches/${batch.id}/events`, { key: null }), 401, { type: "authentication_error" });
    const noRead = await t.createKey({ scopes: ["files:read", "batches:write"] });
    await expectError(await t.api(`/batches/${batch.id}/events`, { key: noRead }), 403, { type: "permission_error" });
    const other = await t.createKey({ project: "elsewhere" });
    await expectError(await t.api(`/batches/${batch.id}/events`, { key: other }), 404, { type: "not_found_error" });
    await expectError(await t.api(`/batches/batch_${"x".repeat(24)}/events`), 404, { type: "not_found_error" });
    // Also under /v1.
    const v1 = await fetch(`${t.url}/v1/batches/${batch.id}/events`, { headers: { authorization: `Bearer ${t.admin}` } });
    expect(v1.status).toBe(200);
    await v1.body?.cancel();
  });
});

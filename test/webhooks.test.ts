// Webhook endpoints and signed, durable, at-least-once delivery (docs/CONTRACT.md §12),
// checked with the official SDK's `webhooks.unwrap`.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { eventually, expectError, json } from "./helpers/inference";
import { freshDataDir, startTestServer, testDatabaseArgs, type TestServer } from "./helpers/server";
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import { pgMigrations, sqliteMigrations, type Migration } from "../src/db/migrations.gen";
import type { AppContext } from "../src/context";
import { WebhookSender } from "../src/webhooks/sender";
import { SCENARIO_MS } from "./helpers/wait";

interface Received {
  body: string;
  headers: Record<string, string>;
  at: number;
}

/** A webhook receiver on loopback: records every request; `answer` decides each status. */
function startReceiver(port = 0) {
  const got: Received[] = [];
  const r = {
    got,
    answer: (_n: number): number => 200,
    server: null as ReturnType<typeof Bun.serve> | null,
    port: 0,
    get url() {
      return `http://127.0.0.1:${r.port}/hook?token=abc`;
    },
    start(p = port) {
      r.server = Bun.serve({
        port: p,
        hostname: "127.0.0.1",
        fetch: async (req) => {
          const body = await req.text();
          got.push({ body, headers: Object.fromEntries(req.headers.entries()), at: Date.now() });
          return new Response("ok", { status: r.answer(got.length) });
        },
      });
      r.port = r.server.port!;
    },
    stop() {
      r.server?.stop(true);
      r.server = null;
    },
  };
  r.start();
  return r;
}

const unwrapper = new OpenAI({ apiKey: "unused", baseURL: "http://127.0.0.1:1" });

async function createEndpoint(t: TestServer, body: Record<string, unknown>, key?: string) {
  const res = await t.api("/webhook_endpoints", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), key });
  return res;
}

/** The receivers here are on loopback, which webhooks may reach only when opened (docs/CONTRACT.md §16; test/webhooks-egress.test.ts). */
const HOOK_ENV = { OFFPEAK_WEBHOOK_RETRY_BASE_MS: "200", OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "127.0.0.1" };

let t: TestServer;
let client: OpenAI;
const rx = startReceiver();

beforeAll(async () => {
  t = await startTestServer({ env: HOOK_ENV });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
  rx.stop();
});

describe("webhook endpoints", () => {
  test("create shows the secret once; list and delete never do; ?project filters; bad input is a 400 naming the field", async () => {
    const res = await createEndpoint(t, { url: rx.url });
    expect(res.status).toBe(200);
    const ep = await json(res);
    expect(ep).toEqual({
      id: expect.stringMatching(/^whep_[0-9A-Za-z]{24}$/),
      object: "webhook_endpoint",
      url: rx.url,
      events: ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"],
      project: "default",
      created_at: expect.any(Number),
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/),
    });
    expect(Buffer.from(ep.secret.slice(6), "base64")).toHaveLength(32);
    const other = await json(await createEndpoint(t, { url: "https://example.invalid/x", events: ["batch.failed"], project: "p2" }));
    expect(other.project).toBe("p2");
    const all = await json(await t.api("/webhook_endpoints"));
    expect(all.object).toBe("list");
    expect(all.data.map((e: any) => e.id)).toEqual(expect.arrayContaining([ep.id, other.id]));
    for (const e of all.data) expect(e.secret).toBeUndefined();
    const p2 = await json(await t.api("/webhook_endpoints?project=p2"));
    expect(p2.data.map((e: any) => e.id)).toEqual([other.id]);
    const del = await t.api(`/webhook_endpoints/${other.id}`, { method: "DELETE" });
    expect(await json(del)).toEqual({ id: other.id, object: "webhook_endpoint", deleted: true });
    await expectError(await t.api(`/webhook_endpoints/${other.id}`, { method: "DELETE" }), 404, { type: "not_found_error" });
    await t.api(`/webhook_endpoints/${ep.id}`, { method: "DELETE" });

    await expectError(await createEndpoint(t, {}), 400, { param: "url" });
    await expectError(await createEndpoint(t, { url: "ftp://x.example/" }), 400, { param: "url" });
    await expectError(await createEndpoint(t, { url: "not a url" }), 400, { param: "url" });
    await expectError(await createEndpoint(t, { url: rx.url, events: ["batch.exploded"] }), 400, { param: "events" });
    await expectError(await createEndpoint(t, { url: rx.url, events: [] }), 400, { param: "events" });
    await expectError(await createEndpoint(t, { url: rx.url, project: "../x" }), 400, { param: "project" });
    const bad = await t.api("/webhook_endpoints", { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
    expect(bad.status).toBe(400);
    // Nothing was stored by the failures.
    expect((await json(await t.api("/webhook_endpoints"))).data).toEqual([]);
  });

  test("401 without a key, 403 without admin, 404 for unknown ids on every route", async () => {
    const notAdmin = await t.createKey({ scopes: ["files:read", "files:write", "batches:read", "batches:write", "inference"] });
    const id = `whep_${"a".repeat(24)}`;
    const routes: [string, string][] = [
      ["POST", "/webhook_endpoints"],
      ["GET", "/webhook_endpoints"],
      ["DELETE", `/webhook_endpoints/${id}`],
      ["GET", `/webhook_endpoints/${id}/deliveries`],
    ];
    for (const [method, path] of routes) {
      const init = { method, headers: { "content-type": "application/json" }, body: method === "POST" ? JSON.stringify({ url: rx.url }) : undefined };
      await expectError(await t.api(path, { ...init, key: null }), 401, { type: "authentication_error" });
      await expectError(await t.api(path, { ...init, key: notAdmin }), 403, { type: "permission_error" });
    }
    await expectError(await t.api(`/webhook_endpoints/${id}`, { method: "DELETE" }), 404, { type: "not_found_error" });
    await expectError(await t.api(`/webhook_endpoints/${id}/deliveries`), 404, { type: "not_found_error" });
    await expectError(await t.api(`/webhook_endpoints/..%2F..%2Fkeys/deliveries`), 404);
  });
});

describe("delivery", () => {
  test("a completed batch is delivered, signed so that the SDK's webhooks.unwrap accepts it; a tampered body is refused", async () => {
    rx.got.length = 0;
    const ep = await json(await createEndpoint(t, { url: rx.url }));
    const { batch } = await createBatch(client, [chatReq("w1", "hello hooks")]);
    await waitBatch(client, batch.id);
    await eventually(() => rx.got.length >= 1, "the webhook to arrive", 10_000, 50);
    const [hit] = rx.got;
    expect(hit!.headers["content-type"]).toBe("application/json");
    const evt = (await unwrapper.webhooks.unwrap(hit!.body, hit!.headers, ep.secret)) as any;
    expect(evt).toEqual({ id: expect.stringMatching(/^evt_[0-9A-Za-z]{24}$/), object: "event", type: "batch.completed", created_at: expect.any(Number), data: { id: batch.id } });
    expect(hit!.headers["webhook-id"]).toBe(evt.id);
    expect(Object.keys(JSON.parse(hit!.body))).toEqual(["id", "object", "type", "created_at", "data"]);
    let refused: unknown = null;
    try {
      await unwrapper.webhooks.unwrap(hit!.body.replace(batch.id, "batch_" + "x".repeat(24)), hit!.headers, ep.secret);
    } catch (e) {
      refused = e;
    }
    expect(refused).toBeInstanceOf(OpenAI.InvalidWebhookSignatureError);
    // The wrong secret is refused too.
    await expect(unwrapper.webhooks.unwrap(hit!.body, hit!.headers, `whsec_${Buffer.alloc(32, 7).toString("base64")}`)).rejects.toThrow();
    const deliveries = await json(await t.api(`/webhook_endpoints/${ep.id}/deliveries`));
    expect(deliveries.data).toEqual([{ event_id: evt.id, type: "batch.completed", attempt: 1, status_code: 200, error: null, created_at: expect.any(Number) }]);
    await t.api(`/webhook_endpoints/${ep.id}`, { method: "DELETE" });
  });

  test("a receiver's 500 is retried with the same webhook-id; deliveries list every attempt, newest first", async () => {
    rx.got.length = 0;
    rx.answer = (n) => (n === 1 ? 500 : 200);
    try {
      const ep = await json(await createEndpoint(t, { url: rx.url }));
      const { batch } = await createBatch(client, [chatReq("w2", "retry me")]);
      await waitBatch(client, batch.id);
      await eventually(() => rx.got.length >= 2, "the retry to arrive", 10_000, 50);
      expect(rx.got[0]!.headers["webhook-id"]).toBe(rx.got[1]!.headers["webhook-id"]);
      expect(rx.got[0]!.body).toBe(rx.got[1]!.body);
      const evt = (await unwrapper.webhooks.unwrap(rx.got[1]!.body, rx.got[1]!.headers, ep.secret)) as any;
      expect(evt.data.id).toBe(batch.id);
      const d = (await json(await t.api(`/webhook_endpoints/${ep.id}/deliveries`))).data;
      expect(d.map((x: any) => [x.attempt, x.status_code, x.error])).toEqual([
        [2, 200, null],
        [1, 500, "HTTP 500"],
      ]);
      await Bun.sleep(600);
      expect(rx.got).toHaveLength(2);
      await t.api(`/webhook_endpoints/${ep.id}`, { method: "DELETE" });
    } finally {
      rx.answer = () => 200;
    }
  });

  test("events go only to the batch's project, and only the types an endpoint asked for; failed and cancelled batches emit theirs", async () => {
    rx.got.length = 0;
    const mine = await json(await createEndpoint(t, { url: rx.url + "&who=mine" }));
    const failedOnly = await json(await createEndpoint(t, { url: rx.url + "&who=failed-only", events: ["batch.failed", "batch.cancelled"] }));
    const elsewhere = await json(await createEndpoint(t, { url: rx.url + "&who=elsewhere", project: "elsewhere" }));
    const done = (await createBatch(client, [chatReq("w3", "a")])).batch;
    await waitBatch(client, done.id);
    // A line for an unknown model fails validation: batch.failed.
    const failed = (await createBatch(client, [chatReq("w4", "b", { model: "no-such-model" })])).batch;
    expect((await waitBatch(client, failed.id)).status).toBe("failed");
    await eventually(() => rx.got.length >= 3, "three deliveries", 10_000, 50);
    await Bun.sleep(500);
    const seen = rx.got.map((g) => ({ type: JSON.parse(g.body).type, batch: JSON.parse(g.body).data.id, sig: g.headers["webhook-signature"] }));
    expect(seen.filter((s) => s.batch === done.id).map((s) => s.type)).toEqual(["batch.completed"]);
    expect(seen.filter((s) => s.batch === failed.id).map((s) => s.type)).toEqual(["batch.failed", "batch.failed"]);
    // Exactly: mine got completed + failed, failed-only got failed, elsewhere got nothing.
    expect(rx.got).toHaveLength(3);
    const secrets = [mine.secret, failedOnly.secret, elsewhere.secret];
    const verifiedBy = async (g: Received) => {
      const ok: number[] = [];
      for (let i = 0; i < secrets.length; i++) {
        try {
          await unwrapper.webhooks.unwrap(g.body, g.headers, secrets[i]!);
          ok.push(i);
        } catch {}
      }
      return ok;
    };
    const who = await Promise.all(rx.got.map(verifiedBy));
    expect(who.flat().sort()).toEqual([0, 0, 1]);
    for (const ep of [mine, failedOnly, elsewhere]) await t.api(`/webhook_endpoints/${ep.id}`, { method: "DELETE" });
  });
});

test("durable: a receiver down when the batch ends gets the event after offpeak restarts (same webhook-id every try)", async () => {
  const dataDir = freshDataDir();
  const r2 = startReceiver();
  const port = r2.port;
  let s: TestServer | null = await startTestServer({ dataDir, env: HOOK_ENV });
  try {
    const ep = await json(await createEndpoint(s, { url: r2.url }));
    r2.stop(); // down before the batch ends
    const c = s.sdk();
    const { batch } = await createBatch(c, [chatReq("d1", "durable")]);
    await waitBatch(c, batch.id);
    // At least one failed attempt is recorded while it is down.
    await eventually(async () => (await json(await s!.api(`/webhook_endpoints/${ep.id}/deliveries`))).data.length >= 1, "a failed attempt", 10_000, 50);
    const failedTry = (await json(await s.api(`/webhook_endpoints/${ep.id}/deliveries`))).data.at(-1);
    expect(failedTry.status_code).toBeNull();
    expect(failedTry.error).toBe("connect_failed"); // a coarse class, never the error's text (docs/CONTRACT.md §16)
    await s.stop();
    s = null;
    r2.start(port);
    s = await startTestServer({ dataDir, env: HOOK_ENV });
    await eventually(() => r2.got.length >= 1, "delivery after the restart", 15_000, 50);
    const evt = (await unwrapper.webhooks.unwrap(r2.got[0]!.body, r2.got[0]!.headers, ep.secret)) as any;
    expect(evt.type).toBe("batch.completed");
    expect(evt.data.id).toBe(batch.id);
    expect(evt.id).toBe(failedTry.event_id);
  } finally {
    await s?.stop();
    r2.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("an event's created_at is in Unix seconds; delivery gives up 72 h after it (an injected clock), not before, and tries no more", async () => {
  // The sender's clock: real time plus `skew`, which the receiver moves forward as it answers.
  let skew = 0;
  const HOUR = 3600_000;
  const r3 = startReceiver();
  r3.answer = (n) => {
    // The sender reads its clock after the answer: attempt 1 fails "71 h 59 min" after the event was made,
    // attempt 2 "72 h 1 s" after.
    skew = n === 1 ? 72 * HOUR - 60_000 : 72 * HOUR + 1000;
    return 500;
  };
  const s = await startTestServer({ env: { ...HOOK_ENV, OFFPEAK_WEBHOOK_RETRY_BASE_MS: "50" }, webhookClock: () => Date.now() + skew });
  try {
    const ep = await json(await createEndpoint(s, { url: r3.url }));
    const c = s.sdk();
    const before = Math.floor(Date.now() / 1000);
    const { batch } = await createBatch(c, [chatReq("g1", "give up")]);
    await waitBatch(c, batch.id);
    const after = Math.ceil(Date.now() / 1000);
    const e = s.server.ctx.db.t.webhookEvents;
    const row = async () => (await s.server.ctx.db.select().from(e).where(eq(e.endpointId, ep.id)))[0]!;
    // Seconds, like every other created_at (and the event body's).
    const stored = await row();
    expect(stored.createdAt).toBeGreaterThanOrEqual(before);
    expect(stored.createdAt).toBeLessThanOrEqual(after);
    expect(JSON.parse(stored.payload).created_at).toBe(stored.createdAt);

    // 72 h minus a minute: not given up, so there is a second attempt; 72 h and a second: given up.
    await eventually(async () => (await row()).attempts >= 2, "the second attempt to be recorded", 10_000, 20);
    expect(await row()).toMatchObject({ status: "failed", attempts: 2 });
    const d = (await json(await s.api(`/webhook_endpoints/${ep.id}/deliveries`))).data;
    expect(d.map((x: any) => [x.attempt, x.status_code])).toEqual([
      [2, 500],
      [1, 500],
    ]);
    // Attempts are stamped by the same clock, in seconds: the second "72 h" after the event.
    expect(d[0].created_at - stored.createdAt).toBeGreaterThanOrEqual(72 * 3600);
    expect(d[0].created_at - stored.createdAt).toBeLessThan(72 * 3600 + 60);
    // Nothing more is tried: a third attempt would be due some 300 ms later, read at the next second's tick.
    await Bun.sleep(2000);
    expect(r3.got).toHaveLength(2);
    expect((await row()).attempts).toBe(2);
  } finally {
    await s.stop();
    r3.stop();
  }
}, SCENARIO_MS);

test("a migration turns the created_at of events stored in ms (before it) into seconds, and leaves those in seconds", async () => {
  // The data-only migration that does it (found by what it does, not by its name).
  const isIt = (m: Migration) => m.statements.some((s) => /webhook_events/.test(s) && /created_at/.test(s) && /\/\s*1000/.test(s));
  const postgres = process.env.OFFPEAK_TEST_DATABASE === "postgres";
  const migration = (postgres ? pgMigrations : sqliteMigrations).find(isIt);
  if (!migration) throw new Error("no migration converts webhook_events.created_at from ms to seconds");
  const dataDir = freshDataDir();
  let s: TestServer | null = await startTestServer({ dataDir, env: HOOK_ENV });
  try {
    const ep = await json(await createEndpoint(s, { url: "http://127.0.0.1:9/unused" }));
    await s.stop();
    s = null;
    // As an older offpeak left them: one event in ms, one (as now) in seconds, and the migration not yet applied.
    const rows = [
      ["evt_" + "m".repeat(24), 1_795_000_000_123],
      ["evt_" + "s".repeat(24), 1_795_000_000],
    ] as const;
    if (postgres) {
      const db = new SQL({ url: (await testDatabaseArgs(dataDir))[1]!, max: 1 });
      try {
        for (const [id, at] of rows)
          await db`INSERT INTO webhook_events (id, endpoint_id, type, payload, status, attempts, next_attempt_at, created_at) VALUES (${id}, ${ep.id}, 'batch.completed', '{}', 'delivered', 1, ${at}, ${at})`;
        await db`DELETE FROM offpeak_migrations WHERE tag = ${migration!.tag}`;
      } finally {
        await db.close();
      }
    } else {
      const db = new Database(join(dataDir, "offpeak.db"));
      db.exec("PRAGMA busy_timeout = 5000"); // the stopped server's checkpoint Worker may still hold it for a moment
      try {
        const ins = db.query("INSERT INTO webhook_events (id, endpoint_id, type, payload, status, attempts, next_attempt_at, created_at) VALUES (?, ?, 'batch.completed', '{}', 'delivered', 1, ?, ?)");
        for (const [id, at] of rows) ins.run(id, ep.id, at, at);
        db.query("DELETE FROM offpeak_migrations WHERE tag = ?").run(migration!.tag);
      } finally {
        db.close();
      }
    }
    s = await startTestServer({ dataDir, env: HOOK_ENV });
    const e = s.server.ctx.db.t.webhookEvents;
    const after = await s.server.ctx.db.select({ id: e.id, createdAt: e.createdAt }).from(e).where(eq(e.endpointId, ep.id));
    expect(Object.fromEntries(after.map((r) => [r.id, r.createdAt]))).toEqual({ [rows[0][0]]: 1_795_000_000, [rows[1][0]]: 1_795_000_000 });
  } finally {
    await s?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a database error while a delivery reads its endpoint is logged, not a crash; the event stays leased for a later try", async () => {
  const ep = await json(await createEndpoint(t, { url: rx.url }));
  const e = t.server.ctx.db.t.webhookEvents;
  const id = "evt_" + "d".repeat(24);
  // Due in an hour: the server's own sender leaves it alone; the second sender below runs an hour
  // ahead, so the event is due for it alone (else whichever sender leased it first decided the test).
  const AHEAD = 3_600_000;
  await t.server.ctx.db.insert(e).values({ id, endpointId: ep.id, type: "batch.completed", payload: "{}", status: "pending", attempts: 0, nextAttemptAt: Date.now() + AHEAD, createdAt: Math.floor(Date.now() / 1000) });
  // A second sender on the same database, whose read of the endpoint fails (the database away).
  const errors: string[] = [];
  const log = { ...t.server.ctx.log, error: (msg: string) => void errors.push(msg), warn: () => {}, info: () => {} };
  const sender = new WebhookSender({ ...t.server.ctx, log } as AppContext, { clock: () => Date.now() + AHEAD });
  (sender as unknown as { q: { endpoint: { execute: () => Promise<never> } } }).q.endpoint.execute = () => Promise.reject(new Error("connection refused"));
  sender.start();
  try {
    // Without a handler the rejection would end the process (Bun exits on an unhandled one).
    await eventually(() => errors.some((m) => /webhook delivery failed before it was sent/.test(m)), "the failure logged", 5_000, 20);
    const [row] = await t.server.ctx.db.select().from(e).where(eq(e.id, id));
    expect(row).toMatchObject({ status: "pending", attempts: 0 });
    expect(row!.nextAttemptAt).toBeGreaterThan(Date.now() + AHEAD + 30_000); // leased (on its clock): tried again after the lease
    expect(sender.running).toBe(0);
  } finally {
    await sender.stop();
    await t.server.ctx.db.delete(e).where(eq(e.id, id));
  }
});

// docs/CONTRACT.md §22, `Idempotency-Key` on POST /files and POST /batches
// (src/idempotency): within 24 h and a project, the same key with the same
// request answers what the first did (same status and body, same id,
// nothing made twice, `Idempotent-Replayed: true`), also when the two arrive
// together or on two nodes; the same key with another request is 409
// idempotency_key_reused and makes nothing; another project's key is
// another key; a bad header is 400 and stores nothing; 401/403 are as
// without it. 5xx answers, "try again" 4xx (408, 409, 429) and a request
// that died free the key; rows older than 24 h are ignored and swept.
//
// The openai npm SDK sends the header when asked (`headers` in the request
// options). Its own retries carry one key only where the client names an
// idempotency header (`idempotencyHeader`, unset in the openai package, so
// its `idempotencyKey` option is inert there): RetryingOpenAI below sets it,
// as Stainless-made SDKs that do, and a fetch that loses the first answer
// makes the SDK retry a request the server had already carried out.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { and, eq } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import { ApiError } from "../src/errors";
import { LEASE_MS, KEEP_S, sweepIdempotencyKeys, withIdempotency } from "../src/idempotency";
import { chatReq, uploadBatchFile } from "./helpers/batches";
import { expectError, json } from "./helpers/inference";
import { startPostgres } from "./helpers/postgres";
import { s3Storage } from "./helpers/s3";
import { startTestServer, type TestServer } from "./helpers/server";
import { pollUntil, SCENARIO_MS, sleep } from "./helpers/wait";

let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
});

/** A key of a project of its own, so that listings show only what a test made. */
let projects = 0;
async function projectKey(scopes?: string[]): Promise<{ key: string; project: string }> {
  const project = `idem-${++projects}-${Math.random().toString(36).slice(2, 8)}`;
  return { key: await t.createKey({ project, ...(scopes ? { scopes } : {}) }), project };
}

const BATCH_LINES = [chatReq("a", "hello"), chatReq("b", "world")];
const batchFileText = BATCH_LINES.join("\n") + "\n";

function postJson(s: TestServer, path: string, key: string, body: unknown, idem?: string): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (idem !== undefined) headers["idempotency-key"] = idem;
  return s.api(path, { method: "POST", key, headers, body: typeof body === "string" ? body : JSON.stringify(body) });
}

function upload(s: TestServer, key: string, text: string, idem?: string, filename = "in.jsonl", purpose = "batch"): Promise<Response> {
  const form = new FormData();
  form.append("purpose", purpose);
  form.append("file", new Blob([text]), filename);
  return s.api("/files", { method: "POST", key, body: form, headers: idem === undefined ? {} : { "idempotency-key": idem } });
}

async function listBatches(s: TestServer, key: string): Promise<{ id: string }[]> {
  return ((await json(await s.api("/batches?limit=100", { key }))) as { data: { id: string }[] }).data;
}
async function listFiles(s: TestServer, key: string): Promise<{ id: string; filename: string }[]> {
  return ((await json(await s.api("/files?purpose=batch", { key }))) as { data: { id: string; filename: string }[] }).data;
}

async function rowsOf(s: TestServer, project: string) {
  const { db } = s.server.ctx;
  return db.select().from(db.t.idempotencyKeys).where(eq(db.t.idempotencyKeys.project, project));
}

const newKey = () => `k-${crypto.randomUUID()}`;
const batchBody = (fileId: string, extra: Record<string, unknown> = {}) => ({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h", ...extra });

class RetryingOpenAI extends OpenAI {
  protected override idempotencyHeader = "Idempotency-Key";
}

/** A fetch that lets the first POST reach the server and then loses its answer, as a reset connection would. */
function losingFirstAnswer() {
  let lost = 0;
  const f = async (url: string | URL | Request, init?: RequestInit) => {
    const res = await fetch(url, init);
    if ((init?.method ?? "GET").toUpperCase() === "POST" && lost === 0) {
      lost++;
      await res.arrayBuffer();
      throw new TypeError("fetch failed: the connection was reset");
    }
    return res;
  };
  return { fetch: f as unknown as typeof fetch, lost: () => lost };
}

describe("with the openai SDK", () => {
  test("a batch created twice with one Idempotency-Key is one batch: the same id, the second marked replayed", async () => {
    const { key } = await projectKey();
    const client = t.sdk(key);
    const file = await uploadBatchFile(client, BATCH_LINES);
    const idem = newKey();
    const first = await client.batches.create(batchBody(file.id) as any, { headers: { "Idempotency-Key": idem } }).withResponse();
    const second = await client.batches.create(batchBody(file.id) as any, { headers: { "Idempotency-Key": idem } }).withResponse();
    expect(second.data.id).toBe(first.data.id);
    expect(second.data).toEqual(first.data);
    expect(first.response.headers.get("idempotent-replayed")).toBeNull();
    expect(second.response.headers.get("idempotent-replayed")).toBe("true");
    expect((await listBatches(t, key)).map((b) => b.id)).toEqual([first.data.id]);
  });

  test("a file uploaded twice with one key is one file", async () => {
    const { key } = await projectKey();
    const client = t.sdk(key);
    const idem = newKey();
    const make = async () => client.files.create({ file: await toFile(Buffer.from(batchFileText), "twice.jsonl"), purpose: "batch" }, { headers: { "Idempotency-Key": idem } });
    const a = await make();
    const b = await make();
    expect(b).toEqual(a);
    expect((await listFiles(t, key)).map((f) => f.id)).toEqual([a.id]);
  });

  test("the SDK's own retry after a lost answer (one key across its tries) makes one batch and one file", async () => {
    const { key } = await projectKey();
    const file = await uploadBatchFile(t.sdk(key), BATCH_LINES);
    const lossy = losingFirstAnswer();
    const client = new RetryingOpenAI({ apiKey: key, baseURL: t.base, maxRetries: 2, fetch: lossy.fetch });
    const batch = await client.batches.create(batchBody(file.id) as any);
    expect(lossy.lost()).toBe(1);
    expect((await listBatches(t, key)).map((b) => b.id)).toEqual([batch.id]);

    const lossyFiles = losingFirstAnswer();
    const files = new RetryingOpenAI({ apiKey: key, baseURL: t.base, maxRetries: 2, fetch: lossyFiles.fetch });
    const up = await files.files.create({ file: await toFile(Buffer.from(batchFileText), "retried.jsonl"), purpose: "batch" });
    expect(lossyFiles.lost()).toBe(1);
    expect((await listFiles(t, key)).filter((f) => f.filename === "retried.jsonl").map((f) => f.id)).toEqual([up.id]);
  });

  test("without the header nothing changes: two creates are two batches, and nothing is recorded", async () => {
    const { key, project } = await projectKey();
    const client = t.sdk(key);
    const file = await uploadBatchFile(client, BATCH_LINES);
    const a = await client.batches.create(batchBody(file.id) as any);
    const b = await client.batches.create(batchBody(file.id) as any);
    expect(a.id).not.toBe(b.id);
    expect(await rowsOf(t, project)).toEqual([]);
  });
});

describe("with raw requests", () => {
  test("replays the first answer exactly: status, body, the same id; x-request-id is the replay's own", async () => {
    const { key } = await projectKey();
    const fileId = (await json(await upload(t, key, batchFileText))).id;
    const idem = newKey();
    const r1 = await postJson(t, "/batches", key, batchBody(fileId, { metadata: { n: "1" } }), idem);
    const r2 = await postJson(t, "/batches", key, batchBody(fileId, { metadata: { n: "1" } }), idem);
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(r2.headers.get("content-type")).toMatch(/^application\/json/);
    expect(r2.headers.get("idempotent-replayed")).toBe("true");
    expect(r2.headers.get("x-request-id")).not.toBe(r1.headers.get("x-request-id"));
    expect(await r2.text()).toBe(await r1.text());
    expect((await listBatches(t, key)).length).toBe(1);
  });

  test("two identical requests at once make one batch; three uploads at once make one file", async () => {
    const { key } = await projectKey();
    const fileId = (await json(await upload(t, key, batchFileText))).id;
    const idem = newKey();
    const answers = await Promise.all([0, 1].map(() => postJson(t, "/batches", key, batchBody(fileId), idem)));
    const bodies = await Promise.all(answers.map(json));
    expect(answers.map((r) => r.status)).toEqual([200, 200]);
    expect(bodies[1].id).toBe(bodies[0].id);
    expect(answers.filter((r) => r.headers.get("idempotent-replayed") === "true").length).toBe(1);
    expect((await listBatches(t, key)).map((b) => b.id)).toEqual([bodies[0].id]);

    const fileIdem = newKey();
    const ups = await Promise.all([0, 1, 2].map(() => upload(t, key, batchFileText, fileIdem, "together.jsonl")));
    const ids = await Promise.all(ups.map(async (r) => (await json(r)).id));
    expect(ups.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(new Set(ids).size).toBe(1);
    expect(ups.filter((r) => r.headers.get("idempotent-replayed") === "true").length).toBe(2);
    expect((await listFiles(t, key)).filter((f) => f.filename === "together.jsonl").length).toBe(1);
  });

  test("an upload still streaming holds the key: the second (framed with another boundary) waits, reads its body, and replays", async () => {
    const { key, project } = await projectKey();
    const idem = newKey();
    const big = Array.from({ length: 4000 }, (_, i) => chatReq(`s-${i}`, `slow ${i} ${"x".repeat(200)}`)).join("\n") + "\n";
    const framed = (boundary: string) =>
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${big}\r\n--${boundary}--\r\n`,
      );
    const one = framed("first-boundary-1111");
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const half = Math.floor(one.length / 2);
    const slowBody = new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(one.subarray(0, half));
        await held;
        c.enqueue(one.subarray(half));
        c.close();
      },
    });
    const headers = (boundary: string) => ({ "content-type": `multipart/form-data; boundary=${boundary}`, "idempotency-key": idem });
    const first = t.api("/files", { method: "POST", key, headers: headers("first-boundary-1111"), body: slowBody, duplex: "half" } as RequestInit);
    await pollUntil(() => rowsOf(t, project), (rows) => rows.length === 1 && rows[0]!.state === "pending", { what: "the first upload's pending key" });
    let secondDone = false;
    const second = t.api("/files", { method: "POST", key, headers: headers("second-boundary-2222"), body: framed("second-boundary-2222") }).then((r) => {
      secondDone = true;
      return r;
    });
    await sleep(400);
    expect(secondDone).toBe(false);
    release();
    const [a, b] = await Promise.all([first, second]);
    const [ja, jb] = await Promise.all([json(a), json(b)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(jb).toEqual(ja);
    expect(a.headers.get("idempotent-replayed")).toBeNull();
    expect(b.headers.get("idempotent-replayed")).toBe("true");
    expect((await listFiles(t, key)).map((f) => f.id)).toEqual([ja.id]);
  });

  test("the same key with another body, or on another route, is 409 idempotency_key_reused and makes nothing", async () => {
    const { key } = await projectKey();
    const fileId = (await json(await upload(t, key, batchFileText))).id;
    const idem = newKey();
    const first = await json(await postJson(t, "/batches", key, batchBody(fileId), idem));
    await expectError(await postJson(t, "/batches", key, batchBody(fileId, { completion_window: "48h" }), idem), 409, {
      type: "conflict_error",
      code: "idempotency_key_reused",
      param: "Idempotency-Key",
    });
    // Another route: refused before a byte of the upload is stored.
    await expectError(await upload(t, key, batchFileText, idem, "other-route.jsonl"), 409, { code: "idempotency_key_reused" });
    expect((await listBatches(t, key)).map((b) => b.id)).toEqual([first.id]);
    expect((await listFiles(t, key)).map((f) => f.id)).toEqual([fileId]);

    // An upload's key with another file's bytes (or another name) is refused too.
    const up = newKey();
    const f1 = await json(await upload(t, key, batchFileText, up, "u.jsonl"));
    await expectError(await upload(t, key, batchFileText.replace("hello", "HELLO"), up, "u.jsonl"), 409, { code: "idempotency_key_reused" });
    await expectError(await upload(t, key, batchFileText, up, "v.jsonl"), 409, { code: "idempotency_key_reused" });
    expect((await listFiles(t, key)).map((f) => f.id).sort()).toEqual([fileId, f1.id].sort());

    // Two different bodies at once: one is made, the other is refused.
    const race = newKey();
    const both = await Promise.all([postJson(t, "/batches", key, batchBody(fileId, { metadata: { v: "1" } }), race), postJson(t, "/batches", key, batchBody(fileId, { metadata: { v: "2" } }), race)]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 409]);
    expect((await listBatches(t, key)).length).toBe(2);
  });

  test("one key in two projects is two keys", async () => {
    const p1 = await projectKey();
    const p2 = await projectKey();
    const idem = newKey();
    const [f1, f2] = await Promise.all([upload(t, p1.key, batchFileText, idem), upload(t, p2.key, batchFileText, idem)].map(async (r) => (await json(await r)).id));
    expect(f1).not.toBe(f2);
    const idem2 = newKey();
    const b1 = await json(await postJson(t, "/batches", p1.key, batchBody(f1), idem2));
    const b2r = await postJson(t, "/batches", p2.key, batchBody(f2), idem2);
    expect(b2r.headers.get("idempotent-replayed")).toBeNull();
    const b2 = await json(b2r);
    expect(b2r.status, JSON.stringify(b2)).toBe(200);
    expect(b2.id).not.toBe(b1.id);
    expect((await listBatches(t, p1.key)).map((b) => b.id)).toEqual([b1.id]);
    expect((await listBatches(t, p2.key)).map((b) => b.id)).toEqual([b2.id]);
  });

  test("a bad header is 400 invalid_value naming Idempotency-Key, and nothing is made or recorded", async () => {
    const { key, project } = await projectKey();
    const fileId = (await json(await upload(t, key, batchFileText))).id;
    for (const bad of ["", "x".repeat(256), "tab\there", "caf\u00e9"]) {
      await expectError(await postJson(t, "/batches", key, batchBody(fileId), bad), 400, { code: "invalid_value", param: "Idempotency-Key" });
      await expectError(await upload(t, key, batchFileText, bad, "bad-header.jsonl"), 400, { code: "invalid_value", param: "Idempotency-Key" });
    }
    // The limits themselves are fine: 1 and 255 printable characters, spaces and punctuation included.
    for (const good of ["k", "y".repeat(255), "a key with spaces & ~punctuation!"]) expect((await postJson(t, "/batches", key, batchBody(fileId), good)).status).toBe(200);
    expect((await listBatches(t, key)).length).toBe(3);
    expect((await listFiles(t, key)).map((f) => f.id)).toEqual([fileId]);
    expect((await rowsOf(t, project)).length).toBe(3);
  });

  test("401 and 403 are answered as without the header, and record nothing", async () => {
    const { key, project } = await projectKey(["files:read", "batches:read"]);
    const idem = newKey();
    await expectError(await postJson(t, "/batches", "sk-op-not-a-real-key-000000000000000000000000", batchBody("file-x"), idem), 401, { code: "invalid_api_key" });
    await expectError(await t.api("/batches", { method: "POST", key: null, headers: { "idempotency-key": idem } }), 401, { code: "invalid_api_key" });
    await expectError(await postJson(t, "/batches", key, batchBody("file-x"), idem), 403, { code: "insufficient_scope" });
    await expectError(await upload(t, key, batchFileText, idem), 403, { code: "insufficient_scope" });
    expect(await rowsOf(t, project)).toEqual([]);
  });

  test("a final 4xx is kept and replayed; a refusal before the route runs (bad JSON) is not", async () => {
    const { key, project } = await projectKey();
    const idem = newKey();
    const missing = batchBody("file-AAAAAAAAAAAAAAAAAAAAAAAA");
    const r1 = await postJson(t, "/batches", key, missing, idem);
    const e1 = await expectError(r1, 404, { param: "input_file_id" });
    const r2 = await postJson(t, "/batches", key, missing, idem);
    expect(r2.headers.get("idempotent-replayed")).toBe("true");
    expect((await expectError(r2, 404)).message).toBe(e1.message);

    const other = newKey();
    await expectError(await postJson(t, "/batches", key, "{not json", other), 400, { code: "invalid_json" });
    expect((await rowsOf(t, project)).map((r) => r.key)).toEqual([idem]);
  });
});

describe("the key's lifetime (src/idempotency directly)", () => {
  const req = (idem: string) => new Request("http://offpeak.test/api/v1/batches", { method: "POST", headers: { "idempotency-key": idem } });
  const ctx = () => t.server.ctx;

  test("a 5xx, a 429 and anything thrown free the key: the retry runs; a 2xx is then kept", async () => {
    const p = { project: `lifetime-${Date.now()}` };
    const idem = newKey();
    let runs = 0;
    const call = (answer: () => unknown) =>
      withIdempotency(ctx(), req(idem), p, "POST /test", "{}", async () => {
        runs++;
        return answer();
      });
    await expect(call(() => { throw new ApiError("database_unavailable", "down"); })).rejects.toThrow("down");
    await expect(call(() => { throw new ApiError("rate_limit_exceeded", "slow down"); })).rejects.toThrow("slow down");
    await expect(call(() => { throw new Error("a bug"); })).rejects.toThrow("a bug");
    const res500 = await call(() => new Response(JSON.stringify({ error: {} }), { status: 502, headers: { "content-type": "application/json" } }));
    expect((res500 as Response).status).toBe(502);
    expect(await call(() => ({ id: "made" }))).toEqual({ id: "made" });
    const replay = (await call(() => ({ id: "made again" }))) as Response;
    expect(runs).toBe(5);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.json()).toEqual({ id: "made" });
  });

  test("a second request waits for the first; if the first fails, the second runs", async () => {
    const p = { project: `waits-${Date.now()}` };
    const idem = newKey();
    let fail!: () => void;
    const first = withIdempotency(ctx(), req(idem), p, "POST /test", "{}", () => new Promise((_, reject) => (fail = () => reject(new ApiError("internal_error", "boom")))));
    await pollUntil(() => rowsOf(t, p.project), (rows) => rows.length === 1);
    let ran = false;
    const second = withIdempotency(ctx(), req(idem), p, "POST /test", "{}", async () => {
      ran = true;
      return { id: "second" };
    });
    await sleep(300);
    expect(ran).toBe(false);
    fail();
    await expect(first).rejects.toThrow("boom");
    expect(await second).toEqual({ id: "second" });
  });

  test("a pending key whose request died (no renewal for the lease) is taken over at once", async () => {
    const p = { project: `died-${Date.now()}` };
    const idem = newKey();
    const { db } = ctx();
    const now = Date.now();
    await db.insert(db.t.idempotencyKeys).values({ project: p.project, key: idem, requestHash: "0000000000000000:", state: "pending", status: null, body: null, createdAt: now - LEASE_MS - 1000, expiresAt: Math.floor(now / 1000) + KEEP_S });
    const t0 = Date.now();
    expect(await withIdempotency(ctx(), req(idem), p, "POST /test", "{}", async () => ({ id: "took over" }))).toEqual({ id: "took over" });
    expect(Date.now() - t0).toBeLessThan(5000);
    const [row] = await rowsOf(t, p.project);
    expect(row!.state).toBe("done");
  });

  test("a key older than 24 h is another key, and the sweep deletes it", async () => {
    const p = { project: `expired-${Date.now()}` };
    const idem = newKey();
    const { db } = ctx();
    const old = Math.floor(Date.now() / 1000) - KEEP_S - 10;
    const rows = [idem, `${idem}-2`].map((key) => ({ project: p.project, key, requestHash: "0000000000000000:00", state: "done", status: 200, body: '{"id":"old"}', createdAt: old * 1000, expiresAt: old + KEEP_S }));
    await db.insert(db.t.idempotencyKeys).values(rows);
    expect(await withIdempotency(ctx(), req(idem), p, "POST /test", "another body", async () => ({ id: "new" }))).toEqual({ id: "new" });
    expect(await sweepIdempotencyKeys(ctx())).toBeGreaterThanOrEqual(1);
    const left = await rowsOf(t, p.project);
    expect(left.map((r) => [r.key, r.body])).toEqual([[idem, '{"id":"new"}']]);
  });
});

describe("two nodes on one Postgres", () => {
  const nodes: TestServer[] = [];
  beforeAll(async () => {
    const dbUrl = await (await startPostgres()).createDatabase();
    const storage = await s3Storage();
    for (const i of [0, 1])
      nodes.push(await startTestServer({ argv: ["--database-url", dbUrl, "--storage-url", storage.url], env: { ...storage.env, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_NODE_NAME: `idem-node-${i}` } }));
  }, SCENARIO_MS);
  afterAll(async () => {
    for (const n of nodes) await n.stop();
  });

  test("the same request on both nodes at once makes one batch and one file", async () => {
    const [a, b] = nodes as [TestServer, TestServer];
    const key = await a.createKey({ project: "idem-cluster" });
    const fileIdem = newKey();
    const ups = await Promise.all([upload(a, key, batchFileText, fileIdem, "cluster.jsonl"), upload(b, key, batchFileText, fileIdem, "cluster.jsonl")]);
    const files = await Promise.all(ups.map(json));
    expect(ups.map((r) => r.status)).toEqual([200, 200]);
    expect(files[1].id).toBe(files[0].id);
    expect((await listFiles(b, key)).map((f) => f.id)).toEqual([files[0].id]);

    for (let round = 0; round < 3; round++) {
      const idem = newKey();
      const answers = await Promise.all([postJson(a, "/batches", key, batchBody(files[0].id), idem), postJson(b, "/batches", key, batchBody(files[0].id), idem)]);
      const bodies = await Promise.all(answers.map(json));
      expect(answers.map((r) => r.status)).toEqual([200, 200]);
      expect(bodies[1].id).toBe(bodies[0].id);
      expect(answers.filter((r) => r.headers.get("idempotent-replayed") === "true").length).toBe(1);
    }
    expect((await listBatches(a, key)).length).toBe(3);
    // The row is on the shared database: a third request on either node replays.
    const { db } = a.server.ctx;
    const kept = await db.select().from(db.t.idempotencyKeys).where(and(eq(db.t.idempotencyKeys.project, "idem-cluster"), eq(db.t.idempotencyKeys.key, fileIdem)));
    expect(kept.map((r) => r.state)).toEqual(["done"]);
  }, SCENARIO_MS);
});

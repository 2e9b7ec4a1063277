// docs/CONTRACT.md §22 on a cluster (§14): the client APIs — Anthropic's Messages
// and Message Batches, OpenAI's Uploads, Idempotency-Key on a message batch —
// with the official SDKs (@anthropic-ai/sdk, openai) as clients of two nodes
// (child processes) on one Postgres and one bucket. What one node makes the
// other serves: a message batch created on A is retrieved, listed, read and
// deleted on B (its files gone from the bucket), and one is cancelled
// through the node that is not running it; an upload's parts go to both
// nodes and B completes it into a File that runs as a batch; a cancelled
// upload's parts leave the bucket; the same Idempotency-Key on both nodes at
// once makes one message batch; a bad message batch (big enough that its
// input file had begun in the bucket) gets Anthropic's error shape and
// leaves nothing, in the database or the bucket. test/anthropic-*.test.ts
// and test/uploads.test.ts cover the surface itself on one server.
//
// Real parts: Postgres from npm (./helpers/postgres.ts), s3rver
// (./helpers/s3.ts), each node a child process (./helpers/child.ts).
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { expectExactlyOnce, readResults, waitBatch } from "./helpers/batches";
import { ChildServer, killChildren } from "./helpers/child";
import { startPostgres } from "./helpers/postgres";
import { s3Storage, type TestS3 } from "./helpers/s3";
import { chatLine } from "./helpers/server";
import { needs, pollUntil, SCENARIO_MS } from "./helpers/wait";

const tmp = mkdtempSync(join(tmpdir(), "offpeak-client-apis-cluster-"));
let a: ChildServer;
let b: ChildServer;
let dbUrl: string;
let sql: SQL;
let s3: TestS3;
let prefix: string;

beforeAll(async () => {
  // A slow echo (10 ms a request, 4 at a time on a node), so that a message batch of a few thousand requests is still running when cancelled.
  const config = join(tmp, "config.json");
  writeFileSync(config, JSON.stringify({ models: { "offpeak-echo": { latency_ms: 10, max_concurrency: 4 } } }));
  dbUrl = await (await startPostgres()).createDatabase();
  const storage = await s3Storage();
  s3 = storage.s3;
  prefix = storage.prefix;
  const args = ["--config", config, "--database-url", dbUrl, "--storage-url", storage.url];
  const env = { ...storage.env, OFFPEAK_BATCH_WORKERS: "1" };
  // Started together: the migrations are applied once, under the advisory lock.
  [a, b] = await Promise.all(["a", "b"].map((n) => ChildServer.start({ dataDir: join(tmp, `node-${n}`), args, env: { ...env, OFFPEAK_NODE_NAME: `client-apis-${n}` }, startMs: 60_000 })));
  sql = new SQL({ url: dbUrl, max: 2 });
}, SCENARIO_MS);

afterAll(async () => {
  await sql?.close().catch(() => {});
  await Promise.all([a, b].filter(Boolean).map((n) => n.stop("SIGKILL", 5000)));
  await killChildren();
  rmSync(tmp, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------

/** A key of a project of its own, made on node A (the cluster shares keys). */
async function projectKey(name: string): Promise<string> {
  const res = await a.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, project: `${name}-${Math.random().toString(36).slice(2, 8)}` }) });
  if (res.status !== 200) throw new Error(`POST /keys: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { key: string }).key;
}

const anthropic = (node: ChildServer, apiKey: string) => new Anthropic({ baseURL: node.url, apiKey, maxRetries: 0 });
const openai = (node: ChildServer, apiKey: string) => new OpenAI({ baseURL: node.base, apiKey, maxRetries: 0 });

type Req = Anthropic.Messages.Batches.BatchCreateParams.Request;
const req = (customId: string, text: string, extra: Record<string, unknown> = {}): Req => ({
  custom_id: customId,
  params: { model: "offpeak-echo", max_tokens: 200, messages: [{ role: "user", content: text }], ...extra } as Req["params"],
});
type Result = Anthropic.Messages.Batches.MessageBatchIndividualResponse;

function waitEnded(client: Anthropic, id: string) {
  return pollUntil(
    () => client.messages.batches.retrieve(id),
    (x) => x.processing_status === "ended",
    { what: `message batch ${id} to end`, progress: (x) => [x.processing_status, x.request_counts] },
  );
}

async function resultsOf(client: Anthropic, id: string): Promise<Result[]> {
  const out: Result[] = [];
  for await (const r of await client.messages.batches.results(id)) out.push(r);
  return out.sort((x, y) => (x.custom_id < y.custom_id ? -1 : x.custom_id > y.custom_id ? 1 : 0));
}

/** What a call threw (the SDKs' promises are their own kind). */
const rejection = (p: PromiseLike<unknown>): Promise<any> =>
  Promise.resolve(p).then(
    () => null,
    (e) => e,
  );

/** The objects under the cluster's prefix in the bucket. */
const bucketKeys = () => s3.keys(`${prefix}/`);

/** The row of a message batch as the OpenAI list shows it (its files' ids), through `node`. */
async function batchRowOf(node: ChildServer, key: string, msgbatchId: string) {
  const list = (await (await node.api("/batches?include=message_batches&limit=100", { key })).json()) as { data: any[] };
  return list.data.find((x) => x.message_batch_id === msgbatchId) as { input_file_id: string; output_file_id: string | null; error_file_id: string | null } | undefined;
}

const count = async (table: string, project?: string): Promise<number> => {
  const [row] = project ? await sql`SELECT count(*)::int AS n FROM ${sql(table)} WHERE project = ${project}` : await sql`SELECT count(*)::int AS n FROM ${sql(table)}`;
  return row.n as number;
};

// ---------------------------------------------------------------------------

describe("a bad request on the cluster", () => {
  test("a message batch refused late in a body of several MB (its input file begun in the bucket): 400 invalid_request_error in Anthropic's shape, nothing stored", async () => {
    const key = await projectKey("bad");
    const before = { keys: await bucketKeys(), pending: s3.pendingUploads(), batches: await count("batches"), files: await count("files"), idem: await count("idempotency_keys") };
    // ≈12 MB of requests, the duplicate the last: more than one multipart part of the input file is in the bucket when it is found.
    const n = 20_000;
    const requests = Array.from({ length: n }, (_, i) => req(`r${i}`, `request ${i} ${"z".repeat(500)}`));
    requests.push(req("r7", "the same custom_id again"));
    const err = await rejection(anthropic(b, key).messages.batches.create({ requests }));
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.status).toBe(400);
    expect(err.error).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/^requests\.20000\.custom_id: duplicate custom_id 'r7'/) } });

    // And a bad message on the other node, raw: the same shape, and the request-id header.
    const res = await fetch(`${a.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "no max_tokens" }] }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.stringContaining("max_tokens") } });

    // Nothing made: no row on the shared database, no object nor unfinished multipart upload in the bucket (its removal runs in the background).
    expect({ batches: await count("batches"), files: await count("files"), idem: await count("idempotency_keys") }).toEqual({ batches: before.batches, files: before.files, idem: before.idem });
    await pollUntil(
      async () => ({ keys: await bucketKeys(), pending: s3.pendingUploads() }),
      (now) => JSON.stringify(now) === JSON.stringify({ keys: before.keys, pending: before.pending }),
      { what: "the bucket to be as it was" },
    );
    expect((await anthropic(a, key).messages.batches.list()).data).toEqual([]);
  }, SCENARIO_MS);
});

describe("Anthropic's Messages API on node B", () => {
  test("plain and streamed, with a key made on node A", async () => {
    const client = anthropic(b, await projectKey("messages"));
    const params = { model: "offpeak-echo", max_tokens: 100, system: "Echo.", messages: [{ role: "user" as const, content: "Hello from the other node" }] };
    const m = await client.messages.create(params);
    expect(m.id).toMatch(/^msg_[0-9A-Za-z]{24}$/);
    expect(m).toMatchObject({ type: "message", role: "assistant", model: "offpeak-echo", content: [{ type: "text", text: "Hello from the other node" }], stop_reason: "end_turn" });

    const stream = client.messages.stream(params);
    const deltas: string[] = [];
    stream.on("text", (d) => deltas.push(d));
    const final = await stream.finalMessage();
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join("")).toBe("Hello from the other node");
    expect({ content: final.content, stop_reason: final.stop_reason, usage: final.usage } as unknown).toEqual({ content: m.content, stop_reason: m.stop_reason, usage: m.usage });

    const events: string[] = [];
    for await (const e of await client.messages.create({ ...params, stream: true })) events.push(e.type);
    expect(events[0]).toBe("message_start");
    expect(events.at(-1)).toBe("message_stop");
  }, SCENARIO_MS);
});

describe("a message batch made on node A, served by node B", () => {
  let key: string;
  let ended: Anthropic.Messages.Batches.MessageBatch | undefined;
  const texts: Record<string, string> = { first: "Hello there", "second-2": "another question", third_3: "a third one", fourth: "é€ and more" };

  test("created on A; retrieved and listed on B; run to ended; results on B each once with its text, the same (message ids too) on A", async () => {
    key = await projectKey("msgbatch");
    const [onA, onB] = [anthropic(a, key), anthropic(b, key)];
    const created = await onA.messages.batches.create({ requests: Object.entries(texts).map(([id, text], i) => req(id, text, i === 1 ? { system: "Repeat it." } : {})) });
    expect(created.id).toMatch(/^msgbatch_[0-9A-Za-z]{24}$/);

    const seen = await onB.messages.batches.retrieve(created.id);
    expect(seen.id).toBe(created.id);
    expect(seen.created_at).toBe(created.created_at);
    expect(seen.request_counts.processing + seen.request_counts.succeeded).toBe(4);
    const listed = await onB.messages.batches.list();
    expect(listed.data.map((x) => x.id)).toEqual([created.id]);

    const done = await waitEnded(onB, created.id);
    expect(done.request_counts).toEqual({ processing: 0, succeeded: 4, errored: 0, canceled: 0, expired: 0 });
    expect(done.results_url).toBe(`${b.url}/v1/messages/batches/${created.id}/results`);

    const results = await resultsOf(onB, created.id);
    expect(results.map((r) => r.custom_id)).toEqual(Object.keys(texts).sort());
    for (const r of results) {
      if (r.result.type !== "succeeded") throw new Error(`not succeeded: ${JSON.stringify(r)}`);
      expect(r.result.message).toMatchObject({ type: "message", role: "assistant", model: "offpeak-echo", stop_reason: "end_turn", content: [{ type: "text", text: texts[r.custom_id]! }] });
      expect(r.result.message.id).toMatch(/^msg_/);
    }
    expect(await resultsOf(onA, created.id)).toEqual(results);
    ended = done;
  }, SCENARIO_MS);

  test("deleted on B once ended: gone on A too, and its files gone from the bucket", async () => {
    const batch = needs(ended, "created on A; retrieved and listed on B; run to ended");
    const [onA, onB] = [anthropic(a, key), anthropic(b, key)];
    const row = needs(await batchRowOf(a, key, batch.id), "the batch in the OpenAI list with include=message_batches");
    const ownFiles = [row.input_file_id, row.output_file_id, row.error_file_id].filter((f): f is string => !!f);
    const ofBatch = async () => (await bucketKeys()).filter((k) => ownFiles.some((f) => k.includes(f)));
    // Its input file and its answers are in the bucket.
    const stored = await ofBatch();
    expect(stored.some((k) => k.includes(row.input_file_id))).toBe(true);
    expect(stored.some((k) => k.includes(row.output_file_id!))).toBe(true);

    expect(await onB.messages.batches.delete(batch.id)).toEqual({ id: batch.id, type: "message_batch_deleted" });
    expect(await rejection(onA.messages.batches.retrieve(batch.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await rejection(onA.messages.batches.results(batch.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect((await onA.messages.batches.list()).data).toEqual([]);
    for (const f of ownFiles) expect((await a.api(`/files/${f}`, { key })).status).toBe(404);
    await pollUntil(ofBatch, (left) => left.length === 0, { what: "the deleted batch's objects to leave the bucket" });
  }, SCENARIO_MS);

  test("cancel through the node that is not running it, of a batch created on A: canceling, then ended with its unfinished requests canceled; results each once, the same on both nodes", async () => {
    const cancelKey = await projectKey("cancel");
    const n = 6000;
    const created = await anthropic(a, cancelKey).messages.batches.create({ requests: Array.from({ length: n }, (_, i) => req(`c-${i}`, `cancel me ${i}`)) });
    await pollUntil(
      () => anthropic(b, cancelKey).messages.batches.retrieve(created.id),
      (x) => x.request_counts.succeeded > 0,
      { what: "the batch to start", progress: (x) => [x.processing_status, x.request_counts] },
    );
    // Which node holds its shard (one shard: ≈1 MB): the cancel goes to the other, which must reach it through the database.
    const owners = (await sql`SELECT lease_owner FROM batch_shards WHERE batch_id = ${created.id.replace(/^msgbatch_/, "batch_")} AND status = 'running'`).map((r: { lease_owner: string }) => r.lease_owner);
    expect(owners.length).toBe(1);
    expect(owners[0]).toMatch(/^client-apis-[ab]:/);
    const runner = owners[0].startsWith("client-apis-a:") ? a : b;
    const other = runner === a ? b : a;
    const [onRunner, onOther] = [anthropic(runner, cancelKey), anthropic(other, cancelKey)];

    const cancelled = await onOther.messages.batches.cancel(created.id);
    expect(cancelled.id).toBe(created.id);
    expect(cancelled.processing_status).toBe("canceling");
    expect(cancelled.cancel_initiated_at).not.toBeNull();

    const done = await waitEnded(onRunner, created.id);
    const c = done.request_counts;
    expect(c.processing).toBe(0);
    expect(c.errored).toBe(0);
    expect(c.canceled).toBeGreaterThan(0);
    expect(c.succeeded).toBeGreaterThan(0);
    expect(c.succeeded + c.canceled).toBe(n);
    expect((await onOther.messages.batches.retrieve(created.id)).request_counts).toEqual(c);

    const results = await resultsOf(onOther, created.id);
    expect(results.length).toBe(n);
    expect(new Set(results.map((r) => r.custom_id)).size).toBe(n);
    const byType: Record<string, number> = {};
    for (const r of results) byType[r.result.type] = (byType[r.result.type] ?? 0) + 1;
    expect(byType).toEqual({ succeeded: c.succeeded, canceled: c.canceled });
    for (const r of results) if (r.result.type === "succeeded") expect(r.result.message.content).toMatchObject([{ type: "text", text: `cancel me ${r.custom_id.slice(2)}` }]);
    expect(await resultsOf(onRunner, created.id)).toEqual(results);
  }, SCENARIO_MS);
});

describe("Idempotency-Key on POST /v1/messages/batches", () => {
  test("the same key and body on both nodes at once: one message batch (one answer replayed), one input file", async () => {
    const key = await projectKey("idem");
    const body = JSON.stringify({ requests: [req("i1", "once only"), req("i2", "asked twice")] });
    const post = (node: ChildServer, idem: string) =>
      fetch(`${node.url}/v1/messages/batches`, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json", "idempotency-key": idem }, body });
    const ids: string[] = [];
    for (let round = 0; round < 3; round++) {
      const idem = `nightly-${round}-${crypto.randomUUID()}`;
      const answers = await Promise.all([post(a, idem), post(b, idem)]);
      const bodies = (await Promise.all(answers.map((r) => r.json()))) as { id: string }[];
      expect(answers.map((r) => r.status)).toEqual([200, 200]);
      expect(bodies[1]!.id).toBe(bodies[0]!.id);
      expect(answers.filter((r) => r.headers.get("idempotent-replayed") === "true").length).toBe(1);
      ids.push(bodies[0]!.id);
    }
    const listed = (await anthropic(b, key).messages.batches.list()).data.map((x) => x.id);
    expect(listed).toEqual([...ids].reverse());
    const [{ project }] = await sql`SELECT project FROM batches WHERE id = ${ids[0]!.replace(/^msgbatch_/, "batch_")}`;
    expect(await count("batches", project)).toBe(3);
    // One input file each (the batches' output files come as they end).
    const [{ n: inputs }] = await sql`SELECT count(*)::int AS n FROM files WHERE project = ${project} AND purpose = 'batch'`;
    expect(inputs).toBe(3);
  }, SCENARIO_MS);
});

describe("OpenAI Uploads across the nodes", () => {
  const enc = new TextEncoder();
  const partsOf = async (fileId: string) => (await bucketKeys()).filter((k) => k.includes(`${fileId}.parts/`));

  test("parts sent to alternating nodes, completed on the other: the File (its parts in the bucket) runs as a batch that completes", async () => {
    const key = await projectKey("uploads");
    const [onA, onB] = [openai(a, key), openai(b, key)];
    // ≈4.7 MB: more than one 4 MB shard, so a shard spans parts that different nodes took.
    const ids = Array.from({ length: 1500 }, (_, i) => `up-${i}`);
    const bytes = enc.encode(ids.map((id) => chatLine(id, `${id} ${"x".repeat(3000)}`)).join("\n") + "\n");
    const size = Math.ceil(bytes.length / 6) + 11;
    const pieces = Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, Math.min(bytes.length, (i + 1) * size)));
    expect(pieces.length).toBe(6);

    const upload = await onA.uploads.create({ bytes: bytes.length, filename: "cluster.jsonl", mime_type: "application/jsonl", purpose: "batch" });
    const partIds: string[] = [];
    for (const [i, piece] of pieces.entries()) {
      const part = await (i % 2 === 0 ? onB : onA).uploads.parts.create(upload.id, { data: await toFile(piece, `part-${i}`) });
      expect(part.upload_id).toBe(upload.id);
      partIds.push(part.id);
    }
    const done = await onB.uploads.complete(upload.id, { part_ids: partIds });
    expect(done.status).toBe("completed");
    const file = done.file!;
    expect(file).toMatchObject({ object: "file", bytes: bytes.length, purpose: "batch", status: "processed" });
    expect((await partsOf(file.id)).length).toBe(6);
    expect(Buffer.from(await (await onA.files.content(file.id)).arrayBuffer()).equals(Buffer.from(bytes))).toBe(true);

    const batch = await onA.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const finished = await waitBatch(onB, batch.id);
    expect(finished.status).toBe("completed");
    expect(finished.request_counts).toMatchObject({ total: ids.length, completed: ids.length, failed: 0 });
    const out = await readResults(onB, finished.output_file_id);
    expectExactlyOnce(ids, out, await readResults(onB, finished.error_file_id));
    for (const l of out) expect(l.response!.body.choices[0].message.content).toBe(`${l.custom_id} ${"x".repeat(3000)}`);
  }, SCENARIO_MS);

  test("cancel on one node removes from the bucket the parts both nodes took", async () => {
    const key = await projectKey("upload-cancel");
    const [onA, onB] = [openai(a, key), openai(b, key)];
    const upload = await onB.uploads.create({ bytes: 30, filename: "c.txt", mime_type: "text/plain", purpose: "user_data" });
    const [{ file_id: fileId }] = await sql`SELECT file_id FROM uploads WHERE id = ${upload.id}`;
    await onA.uploads.parts.create(upload.id, { data: await toFile(enc.encode("0123456789"), "p0") });
    await onB.uploads.parts.create(upload.id, { data: await toFile(enc.encode("abcdefghij"), "p1") });
    expect((await partsOf(fileId)).length).toBe(2);
    const cancelled = await onA.uploads.cancel(upload.id);
    expect(cancelled).toMatchObject({ id: upload.id, status: "cancelled", file: null });
    await pollUntil(() => partsOf(fileId), (left) => left.length === 0, { what: "the cancelled upload's parts to leave the bucket" });
    // Refused on the other node too.
    const res = await b.api(`/uploads/${upload.id}/complete`, { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ part_ids: [] }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.message).toContain("it is cancelled");
  }, SCENARIO_MS);
});

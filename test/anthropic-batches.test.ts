// docs/CONTRACT.md §22, Message Batches, with the official @anthropic-ai/sdk as the
// client (base URL the server's root) on offpeak-echo: create → retrieve
// until ended → results; list with before_id/after_id/limit; cancel of a
// running batch (its unfinished requests `canceled`); delete only once
// ended; results before the end; whole-batch refusals that make nothing;
// 401/403/404 on every route; the two kinds of batch kept apart.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { runCli } from "./helpers/cli";
import { configWriter } from "./helpers/inference";
import { startTestServer, storedBlobs, type TestServer } from "./helpers/server";
import { needs, pollUntil, SCENARIO_MS } from "./helpers/wait";

let t: TestServer;
const cfg = configWriter("offpeak-msgbatches-");
const MSGBATCH_ID = /^msgbatch_[0-9A-Za-z]{24}$/;
const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

const sdk = (apiKey: string | null = t.admin) => new Anthropic({ baseURL: t.url, apiKey, maxRetries: 0 });
type Req = Anthropic.Messages.Batches.BatchCreateParams.Request;
const req = (customId: string, text: string, extra: Record<string, unknown> = {}): Req => ({
  custom_id: customId,
  params: { model: "offpeak-echo", max_tokens: 100, messages: [{ role: "user", content: text }], ...extra } as Req["params"],
});

async function waitEnded(client: Anthropic, id: string) {
  return pollUntil(
    () => client.messages.batches.retrieve(id),
    (b) => b.processing_status === "ended",
    { what: `message batch ${id} to end`, progress: (b) => [b.processing_status, b.request_counts] },
  );
}

async function resultsOf(client: Anthropic, id: string) {
  const out: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
  for await (const r of await client.messages.batches.results(id)) out.push(r);
  return out;
}

/** The raw route under the server's root (as Anthropic's SDKs call it), with x-api-key. */
const raw = (path: string, init: RequestInit & { key?: string | null } = {}) => {
  const { key = t.admin, ...rest } = init;
  const headers = new Headers(rest.headers);
  if (key !== null) headers.set("x-api-key", key);
  return fetch(`${t.url}/v1/messages/batches${path}`, { ...rest, headers });
};

/** A JSON answer, read field by field. */
const json = async (res: Promise<Response>): Promise<any> => (await res).json();

/** What a call threw (the SDK's promises are its own kind: `expect(…).rejects` does not follow them). */
const rejection = (p: PromiseLike<unknown>): Promise<unknown> =>
  Promise.resolve(p).then(
    () => null,
    (e) => e,
  );

async function expectAnthropicError(res: Response, status: number, type: string, message?: RegExp) {
  const text = await res.text();
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${text.slice(0, 500)}`);
  const body = JSON.parse(text);
  expect(body).toMatchObject({ type: "error", error: { type } });
  if (message) expect(body.error.message).toMatch(message);
}

beforeAll(async () => {
  // A slow echo (4 at a time, 20 ms each) so that a batch of a few thousand requests is still running when cancelled.
  const config = cfg.write("config.json", { models: { "offpeak-echo": { latency_ms: 20, max_concurrency: 4 } } });
  t = await startTestServer({ argv: ["--config", config] });
});
afterAll(async () => {
  await t?.stop();
  cfg.cleanup();
});

let ended: Anthropic.Messages.Batches.MessageBatch | undefined;

describe("a message batch through @anthropic-ai/sdk", () => {
  test("create → retrieve until ended → results: each custom_id once, succeeded with the echo of its text", async () => {
    const client = sdk();
    const requests = [req("first", "Hello there"), req("second-2", "another question", { system: "Repeat it." }), req("third_3", "a third one")];
    const created = await client.messages.batches.create({ requests });
    expect(created.id).toMatch(MSGBATCH_ID);
    expect(created).toMatchObject({ type: "message_batch", processing_status: "in_progress", archived_at: null, results_url: null, ended_at: null, cancel_initiated_at: null });
    expect(created.created_at).toMatch(RFC3339);
    // 24 h to run, as Anthropic's.
    expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600 * 1000);
    expect(created.request_counts).toEqual({ processing: 3, succeeded: 0, errored: 0, canceled: 0, expired: 0 });

    const b = await waitEnded(client, created.id);
    expect(b.request_counts).toEqual({ processing: 0, succeeded: 3, errored: 0, canceled: 0, expired: 0 });
    expect(b.ended_at).toMatch(RFC3339);
    expect(b.results_url).toBe(`${t.url}/v1/messages/batches/${created.id}/results`);

    const results = await resultsOf(client, created.id);
    expect(results.map((r) => r.custom_id).sort()).toEqual(["first", "second-2", "third_3"]);
    const texts: Record<string, string> = { first: "Hello there", "second-2": "another question", third_3: "a third one" };
    for (const r of results) {
      if (r.result.type !== "succeeded") throw new Error(`not succeeded: ${JSON.stringify(r)}`);
      const m = r.result.message;
      expect(m).toMatchObject({ type: "message", role: "assistant", model: "offpeak-echo", stop_reason: "end_turn" });
      expect(m.content).toMatchObject([{ type: "text", text: texts[r.custom_id]! }]);
      expect(m.usage.output_tokens).toBeGreaterThan(0);
    }
    // A message keeps its id however often the results are read (it was written with the answer).
    const again = await resultsOf(client, created.id);
    const idOf = (rs: typeof results) => Object.fromEntries(rs.map((r) => [r.custom_id, r.result.type === "succeeded" ? r.result.message.id : null]));
    expect(idOf(again)).toEqual(idOf(results));
    expect(Object.values(idOf(results))).toEqual(expect.arrayContaining([expect.stringMatching(/^msg_/)]));
    ended = b;
  });

  test("results of several MB (the output file read back in pieces, lines cut between them): each request once, with its own answer", async () => {
    const client = sdk();
    // ≈1,200 answers of ≈2.5 KB: an output file of several MiB, read a MiB at a time.
    const n = 1200;
    const text = (i: number) => `${i} ${"é€x".repeat(300)} ${i}`;
    const created = await client.messages.batches.create({ requests: Array.from({ length: n }, (_, i) => req(`big-${i}`, text(i), { max_tokens: 4096 })) });
    await waitEnded(client, created.id);
    const results = await resultsOf(client, created.id);
    expect(results.length).toBe(n);
    expect(new Set(results.map((r) => r.custom_id)).size).toBe(n);
    for (const r of results) {
      if (r.result.type !== "succeeded") throw new Error(`not succeeded: ${JSON.stringify(r).slice(0, 300)}`);
      expect(r.result.message.content).toEqual([{ type: "text", text: text(Number(r.custom_id.slice(4))), citations: null }]);
    }
  }, SCENARIO_MS);

  test("creates at once, one refused and one cut off by its client mid-body: each of the others is the batch of its own requests, and a create after them works", async () => {
    const client = sdk();
    const set = (tag: string, n: number) => Array.from({ length: n }, (_, i) => req(`${tag}-${i}`, `${tag} text ${i}`, { max_tokens: 4 }));
    // A client that sends part of a body and goes away: its create's Worker is left mid-body.
    const cut = new AbortController();
    let chunks = 0;
    const partial = new ReadableStream<Uint8Array>({
      async pull(c) {
        if (chunks++ === 0) c.enqueue(new TextEncoder().encode('{"requests":[' + set("cut", 200).map((r) => JSON.stringify(r)).join(",") + ","));
        else {
          await Bun.sleep(50);
          cut.abort();
        }
      },
    });
    const cutOff = raw("", { method: "POST", headers: { "content-type": "application/json" }, body: partial, duplex: "half", signal: cut.signal } as RequestInit).then(
      () => "answered",
      () => "aborted",
    );
    // Four at once: what a key may have under way (the upload slots).
    const [a, refused, c] = await Promise.all([
      client.messages.batches.create({ requests: set("a", 500) }),
      rejection(client.messages.batches.create({ requests: [...set("r", 2000), req("r-7", "again")] })),
      client.messages.batches.create({ requests: set("c", 1) }),
    ]);
    expect(await cutOff).toBe("aborted");
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    expect(String((refused as Error).message)).toMatch(/requests\.2000\.custom_id: duplicate custom_id 'r-7'/);
    const after = await client.messages.batches.create({ requests: set("d", 5) });
    for (const [batch, tag, n] of [
      [a, "a", 500],
      [c, "c", 1],
      [after, "d", 5],
    ] as const) {
      expect(batch.request_counts.processing).toBe(n);
      await waitEnded(client, batch.id);
      const results = await resultsOf(client, batch.id);
      expect(results.map((r) => r.custom_id).sort()).toEqual(set(tag, n).map((r) => r.custom_id).sort());
    }
  }, SCENARIO_MS);

  test("results and delete before the batch ends: 400 invalid_request_error; after it ends, delete removes it and its files", async () => {
    const client = sdk();
    const running = await client.messages.batches.create({ requests: Array.from({ length: 400 }, (_, i) => req(`r${i}`, `line ${i}`)) });
    await expectAnthropicError(await raw(`/${running.id}/results`), 400, "invalid_request_error", /not ended/);
    expect(await rejection(client.messages.batches.delete(running.id))).toBeInstanceOf(Anthropic.BadRequestError);
    await client.messages.batches.cancel(running.id);
    await waitEnded(client, running.id);

    const filesBefore = (await json(t.api("/files?limit=100"))).data.map((f: { id: string }) => f.id);
    const row = (await json(t.api(`/batches?include=message_batches&limit=100`))).data.find((b: { message_batch_id?: string }) => b.message_batch_id === running.id);
    expect(row).toBeDefined();
    const ownFiles = [row.input_file_id, row.output_file_id, row.error_file_id].filter(Boolean);
    expect(ownFiles.length).toBeGreaterThanOrEqual(2);
    for (const f of ownFiles.slice(0, 1)) expect(filesBefore).toContain(f);

    expect(await client.messages.batches.delete(running.id)).toEqual({ id: running.id, type: "message_batch_deleted" });
    expect(await rejection(client.messages.batches.retrieve(running.id))).toBeInstanceOf(Anthropic.NotFoundError);
    const filesAfter = (await json(t.api("/files?limit=100"))).data.map((f: { id: string }) => f.id);
    for (const f of ownFiles) expect(filesAfter).not.toContain(f);
    for (const f of ownFiles) expect((await t.api(`/files/${f}`)).status).toBe(404);
    await pollUntil(() => storedBlobs(t), (names) => !names.some((n) => ownFiles.some((f) => n.includes(f))), { what: "the deleted batch's blobs to go" });
  });

  test("cancel of a running batch: canceling, then ended with its unfinished requests canceled", async () => {
    const client = sdk();
    const n = 3000;
    const b = await client.messages.batches.create({ requests: Array.from({ length: n }, (_, i) => req(`c-${i}`, `cancel me ${i}`)) });
    await pollUntil(
      () => client.messages.batches.retrieve(b.id),
      (x) => x.request_counts.succeeded > 0,
      { what: "the batch to start", progress: (x) => x.request_counts },
    );
    const cancelled = await client.messages.batches.cancel(b.id);
    expect(cancelled.id).toBe(b.id);
    expect(["canceling", "ended"]).toContain(cancelled.processing_status);
    expect(cancelled.cancel_initiated_at).toMatch(RFC3339);
    const done = await waitEnded(client, b.id);
    const c = done.request_counts;
    expect(c.processing).toBe(0);
    expect(c.canceled).toBeGreaterThan(0);
    expect(c.succeeded).toBeGreaterThan(0);
    expect(c.succeeded + c.canceled + c.errored + c.expired).toBe(n);
    expect(c.errored).toBe(0);

    const results = await resultsOf(client, b.id);
    const ids = results.map((r) => r.custom_id);
    expect(new Set(ids).size).toBe(n);
    expect(ids.length).toBe(n);
    const byType: Record<string, number> = {};
    for (const r of results) byType[r.result.type] = (byType[r.result.type] ?? 0) + 1;
    expect(byType).toEqual({ succeeded: c.succeeded, canceled: c.canceled });
    // A cancel of an ended batch answers it as it is.
    expect((await client.messages.batches.cancel(b.id)).processing_status).toBe("ended");
  });
});

describe("Idempotency-Key", () => {
  test("the same key and body: the first answer again (one batch made); the same key with another body: 409", async () => {
    const key = await t.createKey({ name: "idem", scopes: ["batches:read", "batches:write"], project: "msgbatch-idem" });
    const body = JSON.stringify({ requests: [req("i1", "once only"), req("i2", "twice asked")] });
    const post = (b: string) => raw("", { method: "POST", key, headers: { "content-type": "application/json", "idempotency-key": "nightly-1" }, body: b });
    const first = await post(body);
    expect(first.status).toBe(200);
    const a = (await first.json()) as { id: string };
    const again = await post(body);
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(((await again.json()) as { id: string }).id).toBe(a.id);
    expect((await sdk(key).messages.batches.list()).data.map((b) => b.id)).toEqual([a.id]);
    await expectAnthropicError(await post(JSON.stringify({ requests: [req("i1", "something else")] })), 409, "invalid_request_error", /Idempotency-Key/);
    expect((await sdk(key).messages.batches.list()).data.map((b) => b.id)).toEqual([a.id]);
  });
});

describe("list", () => {
  test("newest first; limit, after_id and before_id page through them (has_more, first_id, last_id); the SDK's auto-pagination sees each once", async () => {
    // A project of its own: only these five are in it.
    const key = await t.createKey({ name: "lister", scopes: ["batches:read", "batches:write", "files:read"], project: "msgbatch-list" });
    const client = sdk(key);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await client.messages.batches.create({ requests: [req(`l${i}`, `list ${i}`)] })).id);
    const newestFirst = [...ids].reverse();

    const all = await client.messages.batches.list({ limit: 20 });
    expect(all.data.map((b) => b.id)).toEqual(newestFirst);
    expect(all.has_more).toBe(false);

    const p1 = await client.messages.batches.list({ limit: 2 });
    expect(p1.data.map((b) => b.id)).toEqual(newestFirst.slice(0, 2));
    expect(p1).toMatchObject({ has_more: true, first_id: newestFirst[0], last_id: newestFirst[1] });
    const p2 = await client.messages.batches.list({ limit: 2, after_id: p1.last_id! });
    expect(p2.data.map((b) => b.id)).toEqual(newestFirst.slice(2, 4));
    expect(p2.has_more).toBe(true);
    const p3 = await client.messages.batches.list({ limit: 2, after_id: p2.last_id! });
    expect(p3.data.map((b) => b.id)).toEqual(newestFirst.slice(4));
    expect(p3).toMatchObject({ has_more: false, first_id: newestFirst[4], last_id: newestFirst[4] });

    // before_id: the `limit` batches just newer than it, still newest first.
    const back = await client.messages.batches.list({ limit: 2, before_id: newestFirst[4]! });
    expect(back.data.map((b) => b.id)).toEqual(newestFirst.slice(2, 4));
    expect(back.has_more).toBe(true);
    const back2 = await client.messages.batches.list({ limit: 2, before_id: back.first_id! });
    expect(back2.data.map((b) => b.id)).toEqual(newestFirst.slice(0, 2));
    expect(back2.has_more).toBe(false);

    const seen: string[] = [];
    for await (const b of client.messages.batches.list({ limit: 2 })) seen.push(b.id);
    expect(seen).toEqual(newestFirst);

    // limit outside 1–1000, an unknown cursor: 400.
    await expectAnthropicError(await raw("?limit=0", { key }), 400, "invalid_request_error");
    await expectAnthropicError(await raw("?limit=1001", { key }), 400, "invalid_request_error");
    await expectAnthropicError(await raw("?after_id=msgbatch_000000000000000000000000", { key }), 400, "invalid_request_error");

    // The OpenAI list of the project does not show them; with include=message_batches (the console, the CLI) it does.
    const openai = await json(t.api("/batches", { key }));
    expect(openai.data).toEqual([]);
    const both = await json(t.api("/batches?include=message_batches", { key }));
    expect(both.data.map((b: { message_batch_id: string }) => b.message_batch_id)).toEqual(newestFirst);
    expect(both.data.every((b: { api: string }) => b.api === "anthropic")).toBe(true);

    // `offpeak batches list` lists them beside the others, saying which they are.
    const listed = await runCli(["batches", "list", "--base-url", t.base, "--api-key", key]);
    expect(listed.code).toBe(0);
    for (const id of ids) expect(listed.stdout).toMatch(new RegExp(`^batch_\\w+ .*/v1/chat/completions \\(anthropic ${id}\\)$`, "m"));
  });
});

describe("refused: the whole batch, with nothing made", () => {
  /** The input files, batches and stored blobs there are (result files of earlier batches that end meanwhile aside). */
  async function state() {
    const files = (await json(t.api("/files?limit=100&purpose=batch"))).data.map((f: { id: string }) => f.id);
    const batches = (await json(t.api("/batches?include=message_batches&limit=100"))).data.map((b: { id: string }) => b.id);
    return { files, batches, blobs: (await storedBlobs(t)).filter((n) => !n.includes(".parts")) };
  }

  const cases: [string, () => unknown, RegExp][] = [
    ["a duplicate custom_id", () => ({ requests: [req("same", "a"), req("other", "b"), req("same", "c")] }), /requests\.2\.custom_id: duplicate custom_id 'same'/],
    ["a custom_id with a space", () => ({ requests: [req("ok", "a"), req("not ok", "b")] }), /requests\.1\.custom_id: must match/],
    ["a custom_id of 65 characters", () => ({ requests: [req("x".repeat(65), "a")] }), /requests\.0\.custom_id: must match/],
    ["params without max_tokens", () => ({ requests: [req("a", "a"), { custom_id: "b", params: { model: "offpeak-echo", messages: [{ role: "user", content: "b" }] } }] }), /requests\.1\.params\.max_tokens: Field required \(custom_id 'b'\)/],
    ["a bad content block", () => ({ requests: [req("a", "a", { messages: [{ role: "user", content: [{ type: "video", x: 1 }] }] })] }), /requests\.0\.params\.messages\.0\.content\.0/],
    ["a model that is not there", () => ({ requests: [req("a", "a", { model: "no-such-model" })] }), /requests\.0\.params\.model: model 'no-such-model' is not available/],
    ["stream: true", () => ({ requests: [req("a", "a", { stream: true })] }), /requests\.0\.params\.stream/],
    ["no requests", () => ({ requests: [] }), /requests: must hold at least one request/],
    ["a field besides requests", () => ({ requests: [req("a", "a")], extra: 1 }), /extra: Extra inputs are not permitted/],
    ["more than 100,000 requests", () => ({ requests: Array.from({ length: 100_001 }, (_, i) => req(`m${i}`, "x", { max_tokens: 1 })) }), /at most 100000 requests/],
  ];
  for (const [name, body, message] of cases)
    test(`${name}: 400 invalid_request_error naming it`, async () => {
      const before = await state();
      const err = (await rejection(sdk().messages.batches.create(body() as Anthropic.Messages.Batches.BatchCreateParams))) as InstanceType<typeof Anthropic.BadRequestError> & { error: { error: { message: string } } };
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      expect(err.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
      expect(err.error.error.message).toMatch(message);
      expect(await state()).toEqual(before);
    });

  test("a bad request before a break in the body's JSON: the request is named, as when it is read first", async () => {
    const before = await state();
    const body = `{"requests":[${JSON.stringify(req("fine", "a"))},${JSON.stringify(req("not ok", "b"))} ${"x".repeat(10)}`;
    await expectAnthropicError(await raw("", { method: "POST", headers: { "content-type": "application/json" }, body }), 400, "invalid_request_error", /requests\.1\.custom_id: must match/);
    expect(await state()).toEqual(before);
  });

  test("a body that is not JSON, or not JSON at all: 400", async () => {
    const before = await state();
    await expectAnthropicError(await raw("", { method: "POST", headers: { "content-type": "application/json" }, body: '{"requests":[{"custom_id":"a","params":{' }), 400, "invalid_request_error");
    await expectAnthropicError(await raw("", { method: "POST", headers: { "content-type": "application/json" }, body: '{"requests":[' + JSON.stringify(req("a", "a")) + "]} trailing" }), 400, "invalid_request_error");
    await expectAnthropicError(await raw("", { method: "POST", headers: { "content-type": "text/plain" }, body: JSON.stringify({ requests: [req("a", "a")] }) }), 400, "invalid_request_error");
    expect(await state()).toEqual(before);
  });

  test("a body over 256 MB (streamed, no Content-Length): 413 request_too_large", async () => {
    const before = await state();
    const MB = new Uint8Array(1 << 20).fill(0x20);
    let sent = 0;
    const head = new TextEncoder().encode('{"requests":[' + JSON.stringify(req("a", "a")) + ",");
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent === 0) c.enqueue(head);
        if (sent++ < 257) c.enqueue(MB);
        else c.close();
      },
    });
    const res = await raw("", { method: "POST", headers: { "content-type": "application/json" }, body, duplex: "half" } as RequestInit);
    await expectAnthropicError(res, 413, "request_too_large", /256|268435456/);
    expect(await state()).toEqual(before);
  });
});

describe("keys and ids", () => {
  const routes = (id: string): [string, string][] => [
    ["POST", ""],
    ["GET", ""],
    ["GET", `/${id}`],
    ["POST", `/${id}/cancel`],
    ["DELETE", `/${id}`],
    ["GET", `/${id}/results`],
  ];

  test("401 without a key or with a wrong one, 403 for a key without the batches scopes, on every route", async () => {
    const id = needs(ended, "create → retrieve until ended → results").id;
    const inferenceOnly = await t.createKey({ name: "no-batches", scopes: ["inference", "files:read", "files:write"] });
    const readOnly = await t.createKey({ name: "read-only", scopes: ["batches:read"] });
    for (const [method, path] of routes(id)) {
      const body = method === "POST" && path === "" ? JSON.stringify({ requests: [req("a", "a")] }) : undefined;
      const init = { method, headers: { "content-type": "application/json" }, body };
      await expectAnthropicError(await raw(path, { ...init, key: null }), 401, "authentication_error");
      await expectAnthropicError(await raw(path, { ...init, key: "sk-op-not-a-key-000000000000000000000000" }), 401, "authentication_error");
      await expectAnthropicError(await raw(path, { ...init, key: inferenceOnly }), 403, "permission_error");
      if (method !== "GET") await expectAnthropicError(await raw(path, { ...init, key: readOnly }), 403, "permission_error");
    }
    // The SDK raises its own classes.
    expect(await rejection(sdk("sk-op-not-a-key-000000000000000000000000").messages.batches.retrieve(id))).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(await rejection(sdk(inferenceOnly).messages.batches.list())).toBeInstanceOf(Anthropic.PermissionDeniedError);
    // A read-only key reads.
    expect((await sdk(readOnly).messages.batches.list()).data).toBeDefined();
  });

  test("404 not_found_error for an unknown id, an OpenAI batch's id, or another project's batch; a message batch's id on the OpenAI routes is 404 too", async () => {
    const id = needs(ended, "create → retrieve until ended → results").id;
    const file = await t.sdk().files.create({ file: new File([JSON.stringify({ custom_id: "o", method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] } })], "o.jsonl"), purpose: "batch" });
    const openaiBatch = await t.sdk().batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const otherProject = await t.createKey({ name: "elsewhere", scopes: ["batches:read", "batches:write"], project: "msgbatch-elsewhere" });
    const asMessageBatch = openaiBatch.id.replace(/^batch_/, "msgbatch_");
    for (const bad of ["msgbatch_000000000000000000000000", openaiBatch.id, asMessageBatch, "nonsense"])
      for (const [method, path] of routes(bad).slice(2)) await expectAnthropicError(await raw(path, { method }), 404, "not_found_error");
    for (const [method, path] of routes(id).slice(2)) await expectAnthropicError(await raw(path, { method, key: otherProject }), 404, "not_found_error");
    expect(await rejection(sdk().messages.batches.retrieve(openaiBatch.id))).toBeInstanceOf(Anthropic.NotFoundError);
    // The OpenAI routes: a message batch's id is not a batch's.
    expect((await t.api(`/batches/${id}`)).status).toBe(404);
    expect((await t.api(`/batches/${id}/cancel`, { method: "POST" })).status).toBe(404);
    // And the OpenAI list does not show message batches.
    const listed = (await json(t.api("/batches?limit=100"))).data.map((b: { id: string }) => b.id);
    expect(listed).toContain(openaiBatch.id);
    expect(listed).not.toContain(id.replace(/^msgbatch_/, "batch_"));
  });
});

// Front threads (server.http_threads, src/http/front; docs/CONTRACT.md §20): the
// listeners of a server that has them, answering chat completions for
// upstream models themselves and relaying everything else to the main
// thread. A client must not be able to tell: every question here is asked
// of a server with two front threads and of one without, and the answers
// compared. Then what only front threads have: the asks' slots and holds
// (a client that leaves while queued, a revoked key's stream), the request
// log's client address through the relay, the port, and the stop. And a
// model of several replicas: a front thread serves it too, each request on
// the replica the main thread would have chosen for its prompt.
// (The whole suite also runs through them: OFFPEAK_TEST_HTTP_THREADS.)
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:net";
import OpenAI from "openai";
import type { Server } from "bun";
import { ADMIN_KEY, startTestServer, type TestServer } from "./helpers/server";
import { setThreadSettings, threadSettings } from "../src/threadSettings";
import { revokeKey } from "../src/keys/service";
import { clearOfMinuteEnd } from "./helpers/wait";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { cleanEnv, freePort } from "./helpers/env";

/** An upstream that answers by the last message's content: "fail500", "fail400", "hang", "slow" (streams a chunk per 100 ms), else at once. */
function startUpstream(): Server<undefined> {
  const enc = new TextEncoder();
  return Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path === "/v1/models") return Response.json({ object: "list", data: [{ id: "up-chat", object: "model", created: 0, owned_by: "t" }] });
      const body = (await req.json()) as { model: string; stream?: boolean; messages: { content: string }[] };
      const content = body.messages.at(-1)!.content;
      if (content === "fail500") return Response.json({ error: { message: "engine fell over" } }, { status: 500 });
      if (content === "fail400") return Response.json({ error: { message: "bad thing", type: "invalid_request_error", param: "x", code: "bad" } }, { status: 400 });
      if (content === "hang") return new Promise<Response>(() => {});
      if (body.stream) {
        const n = content === "slow" ? 100 : 3;
        return new Response(
          new ReadableStream({
            async start(c) {
              for (let i = 0; i < n; i++) {
                c.enqueue(enc.encode(`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: body.model, choices: [{ index: 0, delta: { content: `w${i} ` }, finish_reason: null }] })}\n\n`));
                if (content === "slow") await Bun.sleep(100);
              }
              c.enqueue(enc.encode("data: [DONE]\n\n"));
              c.close();
            },
          }),
          { headers: { "content-type": "text/event-stream" } },
        );
      }
      return Response.json({
        id: "chatcmpl-1",
        object: "chat.completion",
        created: 1,
        model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content: `you said ${content}` }, finish_reason: "stop" }],
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      });
    },
  });
}

let upstream: Server<undefined>;
let fronted: TestServer;
let plain: TestServer;
const dir = mkdtempSync(join(tmpdir(), "offpeak-front-"));

function configFile(): string {
  const path = join(dir, "upstreams.json");
  writeFileSync(
    path,
    JSON.stringify({
      upstreams: [
        { name: "up", base_url: `http://127.0.0.1:${upstream.port}/v1`, models: ["up-chat"], timeout_s: 1 },
        { name: "one", base_url: `http://127.0.0.1:${upstream.port}/v1`, models: ["one-chat"], model_map: { "one-chat": "up-chat" }, max_concurrency: 1, queue_size: 4 },
        { name: "strict", base_url: `http://127.0.0.1:${upstream.port}/v1`, models: ["strict-chat"], model_map: { "strict-chat": "up-chat" }, max_concurrency: 1, queue_size: 0 },
      ],
    }),
  );
  return path;
}

beforeAll(async () => {
  upstream = startUpstream();
  const config = configFile();
  [fronted, plain] = await Promise.all([
    startTestServer({ argv: ["--config", config], env: { OFFPEAK_HTTP_THREADS: "2" } }),
    startTestServer({ argv: ["--config", config], env: { OFFPEAK_HTTP_THREADS: "0" } }),
  ]);
});

afterAll(async () => {
  await Promise.all([fronted?.stop(), plain?.stop()]);
  upstream?.stop(true);
});

const chatBody = (content: string, extra: Record<string, unknown> = {}) => JSON.stringify({ model: "up-chat", messages: [{ role: "user", content }], ...extra });

/** A fresh connection per request: each lands on whichever front thread the kernel picks. */
function post(t: TestServer, body: string, headers: Record<string, string> = {}, path = "/v1/chat/completions"): Promise<Response> {
  return fetch(t.url + path, { method: "POST", headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json", connection: "close", ...headers }, body });
}

async function frontCount(t: TestServer): Promise<number> {
  const text = await (await t.api("/metrics")).text();
  let n = 0;
  for (const m of text.matchAll(/^offpeak_http_front_requests_total\{thread="\d+"\} (\d+)/gm)) n += Number(m[1]);
  return n;
}

/** What a client can see of an answer, less what differs by nature (ids, times, rate-limit reset). */
async function seen(res: Response) {
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {}
  const headers = [...res.headers.keys()].filter((k) => !["date", "x-request-id", "content-length"].includes(k)).sort();
  return { status: res.status, body: scrub(body), headers, requestId: /^req_/.test(res.headers.get("x-request-id") ?? "") };
}

const scrub = (v: unknown): unknown =>
  JSON.parse(
    JSON.stringify(v ?? null)
      .replace(/(req|chatcmpl)[_-][A-Za-z0-9]+/g, "$1_ID")
      .replace(/"created":\d+/g, '"created":0'),
  );

describe("answered by front threads as by the main thread", () => {
  const cases: [string, string, Record<string, string>?, string?][] = [
    ["an upstream answer", chatBody("hello")],
    ["no key", chatBody("hello"), { authorization: "" }],
    ["a wrong key and a broken body: the key is judged first", "{", { authorization: "Bearer sk-op-nope" }],
    ["a malformed Authorization header", chatBody("hello"), { authorization: "Basic abc" }],
    ["not JSON", "{"],
    ["the wrong content type", chatBody("hello"), { "content-type": "text/plain" }],
    ["no model", JSON.stringify({ messages: [{ role: "user", content: "x" }] })],
    ["a model that is not a string", JSON.stringify({ model: 5, messages: [] })],
    ["an unknown model with no messages: the model first", JSON.stringify({ model: "nope", messages: [] })],
    ["no messages", JSON.stringify({ model: "up-chat", messages: [] })],
    ["stream_options without stream", chatBody("x", { stream_options: { include_usage: true } })],
    ["stream that is not a boolean", chatBody("x", { stream: "yes" })],
    ["an upstream 500", chatBody("fail500")],
    ["an upstream 400, passed through", chatBody("fail400")],
    ["an upstream that does not answer in time", chatBody("hang")],
    ["the built-in echo model (relayed)", JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "echo me" }] })],
    ["under /api/v1", chatBody("hello"), {}, "/api/v1/chat/completions"],
    ["a trailing slash (Elysia's route, relayed)", chatBody("hello"), {}, "/v1/chat/completions/"],
  ];
  for (const [what, body, headers, path] of cases) {
    test(what, async () => {
      const h = { ...headers };
      if (h.authorization === "") delete h.authorization;
      const ask = (t: TestServer) =>
        fetch(t.url + (path ?? "/v1/chat/completions"), {
          method: "POST",
          headers: { ...(h.authorization === undefined && headers?.authorization === "" ? {} : { authorization: `Bearer ${ADMIN_KEY}` }), "content-type": "application/json", connection: "close", ...h },
          body,
        });
      const [a, b] = await Promise.all([ask(fronted).then(seen), ask(plain).then(seen)]);
      expect(a).toEqual(b);
      expect(a.requestId).toBe(true);
    });
  }

  test("chat completions reach the front threads; other routes are relayed", async () => {
    const before = await frontCount(fronted);
    for (let i = 0; i < 6; i++) expect((await post(fronted, chatBody(`n${i}`))).status).toBe(200);
    expect((await fronted.api("/models")).status).toBe(200);
    expect((await post(fronted, JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "x" }] }))).status).toBe(200);
    // (The metrics registry is the process's: both test servers count into it, the one without front threads never.)
    expect(await frontCount(fronted)).toBe(before + 6);
  });

  test("streams, through the official SDK: the same chunks", async () => {
    const run = async (t: TestServer) => {
      const client = new OpenAI({ baseURL: t.url + "/v1", apiKey: ADMIN_KEY, maxRetries: 0 });
      const stream = await client.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "stream" }], stream: true });
      const parts: string[] = [];
      for await (const c of stream) parts.push(c.choices[0]?.delta?.content ?? "");
      return parts;
    };
    const [a, b] = await Promise.all([run(fronted), run(plain)]);
    expect(a).toEqual(["w0 ", "w1 ", "w2 "]);
    expect(a).toEqual(b);
  });

  test("rate limits are the main thread's: rpm counts requests on every front thread together", async () => {
    await clearOfMinuteEnd();
    const made = (await (await fronted.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "rpm", scopes: ["inference"], rate_limits: { rpm: 3 } }) })).json()) as { key: string };
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await post(fronted, chatBody(`r${i}`), { authorization: `Bearer ${made.key}` })).status);
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
  });

  test("tpm counts the answers' completion tokens, whichever thread read them", async () => {
    const remaining = async (t: TestServer) => {
      const made = (await (await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "tpm", scopes: ["inference"], rate_limits: { tpm: 10_000 } }) })).json()) as { key: string };
      const left: string[] = [];
      for (const extra of [{}, { stream: true, stream_options: { include_usage: true } }, {}]) {
        const res = await post(t, chatBody("count me", extra), { authorization: `Bearer ${made.key}` });
        await res.text();
        left.push(res.headers.get("x-ratelimit-remaining-tokens")!);
      }
      return left;
    };
    const [a, b] = await Promise.all([remaining(fronted), remaining(plain)]);
    expect(a).toEqual(b);
    expect(new Set(a).size).toBe(3);
  });

  test("a key the front thread has not seen accepted is judged before the body is read: 401 with the body never sent", async () => {
    for (const key of ["sk-op-wrong", ADMIN_KEY.slice(0, -1) + "X"]) expect(await statusWithoutBody(fronted.server.port, key)).toBe("HTTP/1.1 401 Unauthorized");
  });

  test("a key revoked after the thread saw it accepted is judged before its body is read again", async () => {
    const t = await startTestServer({ argv: ["--config", configFile()], env: { OFFPEAK_HTTP_THREADS: "1" } });
    try {
      const made = (await (await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "known", scopes: ["inference"] }) })).json()) as { id: string; key: string };
      expect((await post(t, chatBody("known"), { authorization: `Bearer ${made.key}` })).status).toBe(200);
      expect((await t.api(`/keys/${made.id}`, { method: "DELETE" })).status).toBe(200);
      await Bun.sleep(50); // the thread hears of it (a message away)
      expect(await statusWithoutBody(t.server.port, made.key)).toBe("HTTP/1.1 401 Unauthorized");
    } finally {
      await t.stop();
    }
  });

  test("a Host header the router would misread is relayed and judged by the main thread: 401 without a key", async () => {
    for (const host of ["a", "", "a/b"]) {
      const answer = await rawRequest(fronted.server.port, `GET /aa/api/v1/keys HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 401 Unauthorized");
    }
  });

  test("uploads and downloads stream through the relay unchanged", async () => {
    const client = new OpenAI({ baseURL: fronted.url + "/v1", apiKey: ADMIN_KEY, maxRetries: 0 });
    const lines = Array.from({ length: 2000 }, (_, i) => JSON.stringify({ custom_id: `c${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", messages: [{ role: "user", content: `line ${i} ${"x".repeat(200)}` }] } })).join("\n") + "\n";
    const file = await client.files.create({ file: new File([lines], "in.jsonl"), purpose: "batch" });
    expect(file.bytes).toBe(Buffer.byteLength(lines));
    expect(await (await client.files.content(file.id)).text()).toBe(lines);
  });

  test("a download from the disk is sent by the front thread from the file: Content-Length, ranges, no copy", async () => {
    const bytes = new Uint8Array(9 << 20); // over sized.ts's in-memory bound: a copy would be spooled
    for (let i = 0; i < bytes.length; i += 4096) bytes[i] = (i / 4096) & 0xff;
    const form = new FormData();
    form.append("purpose", "user_data");
    form.append("file", new Blob([bytes]), "big.bin");
    const made = (await (await fronted.api("/files", { method: "POST", body: form })).json()) as { id: string; bytes: number };
    expect(made.bytes).toBe(bytes.length);
    const whole = await fronted.api(`/files/${made.id}/content`);
    expect(whole.headers.get("content-length")).toBe(String(bytes.length));
    expect(whole.headers.get("x-offpeak-disk-bytes")).toBeNull();
    expect(new Uint8Array(await whole.arrayBuffer())).toEqual(bytes);
    const part = await fronted.api(`/files/${made.id}/content`, { headers: { range: "bytes=4096-8192" } });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-length")).toBe("4097");
    expect(part.headers.get("content-range")).toBe(`bytes 4096-8192/${bytes.length}`);
    expect(new Uint8Array(await part.arrayBuffer())).toEqual(bytes.subarray(4096, 8193));
    expect(readdirSync(fronted.dataDir).filter((n) => n.startsWith("downloads-front"))).toEqual([]);
  });
});

/** The status line answered to a chat completion whose head says 100 bytes of body and whose body never comes (or why there is none). */
async function statusWithoutBody(port: number, key: string): Promise<string> {
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`;
  const answer = await Promise.race([rawRequest(port, head, false), Bun.sleep(3000).then(() => "no answer in 3 s: the body was waited for")]);
  return answer.split("\r\n")[0]!;
}

/** `toEnd`: resolve when the server closes; else with the first data received. */
function rawRequest(port: number, text: string, toEnd = true): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => s.write(text));
    let out = "";
    s.on("data", (d) => {
      out += d.toString();
      if (!toEnd) {
        resolve(out);
        s.destroy();
      }
    });
    s.on("end", () => resolve(out));
    s.on("error", reject);
  });
}

describe("an upstream of several replicas, served by front threads", () => {
  const MODEL = "pool-chat";
  /** System prompts past the prefix key's 1,024 characters. */
  const system = (k: number) => `You are assistant number ${k}. ` + `Rule ${k}: answer briefly and truthfully. `.repeat(40);
  const ask = (t: TestServer, k: number, question: string) => post(t, JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: "system", content: system(k) }, { role: "user", content: question }] }));
  /** Which replica (index into `ups`) received `content`, or -1. */
  const whereIs = (content: string) => ups.findIndex((u) => (u.counts.get(content) ?? 0) > 0);
  let ups: FakeUpstream[] = [];
  let front: TestServer;
  let main: TestServer;

  beforeAll(async () => {
    ups = await Promise.all([0, 1, 2].map(() => startFakeUpstream({ models: [MODEL], latencyMs: 2 })));
    const path = join(dir, "pool.json");
    writeFileSync(path, JSON.stringify({ upstreams: [{ name: "pool", models: [MODEL], replicas: ups.map((u) => ({ base_url: u.baseUrl })) }] }));
    [front, main] = await Promise.all([
      startTestServer({ argv: ["--config", path], env: { OFFPEAK_HTTP_THREADS: "2" } }),
      startTestServer({ argv: ["--config", path], env: { OFFPEAK_HTTP_THREADS: "0" } }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([front?.stop(), main?.stop()]);
    for (const u of ups) await u.stop();
  });

  /** Until no request is in flight on the pool's replicas. */
  async function idle(t: TestServer): Promise<void> {
    for (let i = 0; i < 100; i++) {
      const text = await (await t.api("/metrics")).text();
      const inFlight = [...text.matchAll(/^offpeak_replica_in_flight\{upstream="pool",[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
      if (inFlight === 0) return;
      await Bun.sleep(10);
    }
    throw new Error("requests still in flight on the replicas");
  }

  /** Requests sent to the pool's replicas, as the main thread counts them. */
  async function replicaRequests(t: TestServer): Promise<number> {
    const text = await (await t.api("/metrics")).text();
    return [...text.matchAll(/^offpeak_replica_requests_total\{upstream="pool",[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
  }

  test("the prompt's prefix chooses the replica on a front thread as on the main thread; distinct prefixes spread; each request counts on its replica", async () => {
    // A thread learns from its first request for the model that it spreads
    // over replicas (that one is relayed: the main thread hashes its body):
    // warm both. Each fresh connection lands on either thread (the kernel
    // hashes its address): that 24 all land on one happens once in 8
    // million runs.
    const sent = 24;
    for (let i = 0; i < sent; i++) expect((await ask(front, 999, `warm-${i}`)).status).toBe(200);
    const frontBefore = await frontCount(front);
    for (let i = 0; i < 8; i++) {
      expect((await ask(front, 1, `same-front-${i}`)).status).toBe(200);
      // The next request may come to the other thread, whose ask can reach the main thread before this one's DONE (no order between two threads' messages): wait for it, or the replica still counts this request and a bounded load may send the next elsewhere.
      await idle(front);
    }
    // All answered by the front threads themselves (none relayed).
    expect(await frontCount(front)).toBe(frontBefore + 8);
    const homes = new Set([0, 1, 2, 3, 4, 5, 6, 7].map((i) => whereIs(`same-front-${i}`)));
    expect(homes.size).toBe(1);
    // The choice depends only on the prompt and the replicas: the server without front threads sends it to the same one.
    expect((await ask(main, 1, "same-main")).status).toBe(200);
    expect(whereIs("same-main")).toBe([...homes][0]!);
    for (let k = 100; k < 130; k++) expect((await ask(front, k, `spread-${k}`)).status).toBe(200);
    const per = ups.map((u) => [...u.counts.keys()].filter((c) => c.startsWith("spread-")).length);
    expect(per.reduce((a, b) => a + b, 0)).toBe(30);
    for (const n of per) expect(n).toBeGreaterThan(0);
    // Every request the front threads answered went out through the main thread's replica counts.
    expect(await replicaRequests(front)).toBe(sent + 8 + 30);
  });

  test("a streamed answer from a replica: the same as the main thread's", async () => {
    const streamed = async (t: TestServer) => {
      const res = await post(t, JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "system", content: system(7) }, { role: "user", content: "stream me" }] }));
      const text = await res.text();
      return { status: res.status, type: res.headers.get("content-type"), done: text.trimEnd().endsWith("data: [DONE]") };
    };
    expect(await streamed(front)).toEqual(await streamed(main));
  });
});

describe("what the main thread keeps for a front thread's request", () => {
  test("a client that leaves while queued for a slot gives it up: the next request gets the slot", async () => {
    // one-chat has one slot: a slow stream holds it, a second request waits, then leaves.
    const client = new OpenAI({ baseURL: fronted.url + "/v1", apiKey: ADMIN_KEY, maxRetries: 0 });
    const holder = await client.chat.completions.create({ model: "one-chat", messages: [{ role: "user", content: "slow" }], stream: true });
    const waiting = new AbortController();
    const queued = fetch(fronted.url + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "one-chat", messages: [{ role: "user", content: "queued" }] }),
      signal: waiting.signal,
    }).catch((e) => e);
    await Bun.sleep(200);
    const depth = async () => Number(/offpeak_model_queue_depth\{model="one-chat",priority="interactive"\} (\d+)/.exec(await (await fronted.api("/metrics")).text())?.[1] ?? 0);
    expect(await depth()).toBe(1);
    waiting.abort();
    await queued;
    for (let i = 0; i < 50 && (await depth()) !== 0; i++) await Bun.sleep(20);
    expect(await depth()).toBe(0);
    holder.controller.abort();
    // The holder's slot comes back when its stream ends: the next request runs.
    const after = await post(fronted, JSON.stringify({ model: "one-chat", messages: [{ role: "user", content: "after" }] }));
    expect(after.status).toBe(200);
    const inFlight = Number(/offpeak_model_in_flight\{model="one-chat",priority="interactive"\} (\d+)/.exec(await (await fronted.api("/metrics")).text())?.[1] ?? -1);
    expect(inFlight).toBe(0);
  });

  test("a whole answer's slot is free again before the client has the answer: one after another on a model with one slot and no queue, never 529", async () => {
    for (let i = 0; i < 150; i++) {
      const res = await post(fronted, JSON.stringify({ model: "strict-chat", messages: [{ role: "user", content: `s${i}` }] }));
      expect({ i, status: res.status }).toEqual({ i, status: 200 });
      await res.text();
    }
  });

  test("a revoked key's stream on a front thread ends within a second, with invalid_api_key", async () => {
    const made = (await (await fronted.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "to-revoke", scopes: ["inference"] }) })).json()) as { id: string; key: string };
    const res = await post(fronted, chatBody("slow", { stream: true }), { authorization: `Bearer ${made.key}` });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read();
    const revokedAt = Date.now();
    expect((await fronted.api(`/keys/${made.id}`, { method: "DELETE" })).status).toBe(200);
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(Date.now() - revokedAt).toBeLessThan(1000);
    expect(text).toContain('"invalid_api_key"');
  });

  test("request lines: one per request with its x-request-id; the client's address through the relay, never a client's claim of it", async () => {
    const lines: string[] = [];
    const log = fronted.server.ctx.log;
    const { members, enabled } = log;
    // The test harness logs errors only: request lines are taken here instead of written.
    log.enabled = () => true;
    log.members = (_level, msg, text) => {
      if (msg === "request") lines.push(text);
    };
    try {
      const a = await post(fronted, chatBody("logged"));
      const b = await post(fronted, chatBody("logged"), { authorization: "Bearer sk-op-wrong", "x-offpeak-peer": "6.6.6.6" });
      const c = await fetch(fronted.url + "/v1/models", { headers: { "x-offpeak-peer": "6.6.6.6", connection: "close" } });
      expect([a.status, b.status, c.status]).toEqual([200, 401, 401]);
      const parsed = lines.map((l) => JSON.parse(`{${l}}`));
      const byId = (res: Response) => parsed.find((p) => p.request_id === res.headers.get("x-request-id"));
      expect(byId(a)).toMatchObject({ route: "/v1/chat/completions", status: 200, client: null });
      expect(byId(b)).toMatchObject({ route: "/v1/chat/completions", status: 401, client: "127.0.0.1" });
      expect(byId(c)).toMatchObject({ route: "/v1/models", status: 401, client: "127.0.0.1" });
    } finally {
      Object.assign(log, { members, enabled });
    }
  });
});

describe("a front thread that fails", () => {
  test("is replaced: the port answers again, and the slot its stream held is let go", async () => {
    const port = freePort();
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "../src/main.ts"), "serve", "--port", String(port), "--data-dir", mkdtempSync(join(dir, "crash-")), "--config", configFile()], {
      env: cleanEnv({ OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_HTTP_THREADS: "1", OFFPEAK_TEST_FRONT_CRASH_PATH: "/crash-front", OFFPEAK_NO_REEXEC: "1" }),
      stdout: "ignore",
      stderr: "pipe",
    });
    const stderr = new Response(proc.stderr).text();
    const url = `http://127.0.0.1:${port}`;
    const up = async () => {
      for (let i = 0; i < 200; i++) {
        if ((await fetch(`${url}/healthz`).then((r) => r.status, () => 0)) === 200) return;
        await Bun.sleep(25);
      }
      throw new Error("no answer");
    };
    try {
      await up();
      const one = (content: string) =>
        fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "one-chat", messages: [{ role: "user", content }], stream: content === "slow" }),
        });
      const holder = await one("slow"); // holds one-chat's only slot on the front thread
      expect(holder.status).toBe(200);
      await fetch(`${url}/crash-front`).catch(() => {});
      await Bun.sleep(300);
      await up();
      const after = await Promise.race([one("after"), Bun.sleep(5000).then(() => null)]);
      expect(after?.status).toBe(200);
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
    expect(await stderr).toContain("front thread ended: starting another");
  });
});

describe("a front thread that fails while the main thread works out an answer for it", () => {
  test("the answer is dropped (never given to a request on the new thread) and the slot it took is let go", async () => {
    const settings = threadSettings();
    setThreadSettings({ ...settings, testFrontCrashPath: "/crash-front" });
    const path = join(dir, "two.json");
    writeFileSync(
      path,
      JSON.stringify({
        upstreams: [
          { name: "one", base_url: `http://127.0.0.1:${upstream.port}/v1`, models: ["one-chat"], model_map: { "one-chat": "up-chat" }, max_concurrency: 1, queue_size: 4 },
          { name: "two", base_url: `http://127.0.0.1:${upstream.port}/v1`, models: ["two-chat"], model_map: { "two-chat": "up-two" } },
        ],
      }),
    );
    const t = await startTestServer({ argv: ["--config", path], env: { OFFPEAK_HTTP_THREADS: "1" } });
    setThreadSettings(settings);
    t.server.ctx.log.error = () => {}; // the failure is logged, on purpose
    try {
      // As a cluster node's rate limiter that asks the database (or a key lookup) would, only slower: admission takes 1.5 s.
      const limiter = t.server.ctx.rateLimiter as unknown as { admit: (...a: unknown[]) => unknown };
      const admit = limiter.admit.bind(limiter);
      let slow = true;
      limiter.admit = (...a: unknown[]) => {
        const r = admit(...a);
        return slow ? new Promise((resolve) => setTimeout(() => resolve(r), 1500)) : r;
      };
      const chat = (content: string, model: string) =>
        fetch(t.url + "/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json", connection: "close" },
          body: JSON.stringify({ model, messages: [{ role: "user", content }] }),
        }).then(
          async (r) => ({ status: r.status, body: await r.text() }),
          () => ({ status: 0, body: "" }),
        );
      const a = chat("A", "one-chat"); // its ask waits in admission on the main thread
      await Bun.sleep(100);
      await fetch(t.url + "/crash-front", { headers: { connection: "close" } }).catch(() => {});
      // Replaced after ≈100 ms: B goes to the new thread while A's answer is still being worked out.
      for (let i = 0; i < 100 && (await fetch(t.url + "/healthz").then((r) => r.status, () => 0)) !== 200; i++) await Bun.sleep(20);
      const b = await chat("B", "two-chat");
      expect(b.status).toBe(200);
      expect(JSON.parse(b.body)).toMatchObject({ model: "up-two", choices: [{ message: { content: "you said B" } }] });
      expect((await a).status).not.toBe(200); // its thread (and its connection) is gone
      slow = false;
      const c = await Promise.race([chat("C", "one-chat"), Bun.sleep(3000).then(() => ({ status: -1, body: "no answer in 3 s" }))]);
      expect(c.status).toBe(200);
      const inFlight = /offpeak_model_in_flight\{model="one-chat",priority="interactive"\} (\d+)/.exec(await (await t.api("/metrics")).text())?.[1];
      expect(inFlight).toBe("0");
    } finally {
      await t.stop();
    }
  });
});

/** Runs `body` with `Worker` replaced by `Hooked` (new Workers only; restored after): to act at a chosen moment of the threads' conversation. */
async function withWorker(Hooked: typeof Worker, body: () => Promise<void>): Promise<void> {
  const Plain = globalThis.Worker;
  globalThis.Worker = Hooked;
  try {
    await body();
  } finally {
    globalThis.Worker = Plain;
  }
}

describe("races between the threads", () => {
  test("a key revoked while its key-only check is answered is not taken as known", async () => {
    let afterBatch: ((batch: string) => void) | null = null;
    class Hooked extends globalThis.Worker {
      override set onmessage(f: ((e: MessageEvent) => void) | null) {
        super.onmessage = (e: MessageEvent) => {
          f?.(e);
          if (typeof e.data === "string") afterBatch?.(e.data);
        };
      }
      override get onmessage() {
        return super.onmessage;
      }
    }
    await withWorker(Hooked, async () => {
      const t = await startTestServer({ env: { OFFPEAK_HTTP_THREADS: "1" } });
      try {
        const made = (await (await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "k", scopes: ["inference"] }) })).json()) as { id: string; key: string };
        // Cached on the main thread (a relayed request): the key-only reply goes out in the same turn as the ask.
        expect((await fetch(t.url + "/v1/models", { headers: { authorization: `Bearer ${made.key}` } })).status).toBe(200);
        afterBatch = (batch) => {
          if (!batch.includes('"keyOnly":true')) return;
          afterBatch = null;
          void revokeKey(t.server.ctx.db, made.id); // revoked in the turn that answered the check: the reply and forget-keys go out together
        };
        await post(t, JSON.stringify({ model: "nope", messages: [{ role: "user", content: "x" }] }), { authorization: `Bearer ${made.key}` });
        await Bun.sleep(300);
        expect(await statusWithoutBody(t.server.port, made.key)).toBe("HTTP/1.1 401 Unauthorized");
      } finally {
        await t.stop();
      }
    });
  });

  test("a replacement thread that cannot listen at first is tried again until it does", async () => {
    let badPort = 0;
    class Hooked extends globalThis.Worker {
      override postMessage(m: unknown, ...rest: unknown[]) {
        const init = m !== null && typeof m === "object" && "port" in m && badPort ? { ...m, port: badPort } : m;
        return (super.postMessage as (...a: unknown[]) => void)(init, ...rest);
      }
    }
    const blocker = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    await withWorker(Hooked, async () => {
      const settings = threadSettings();
      setThreadSettings({ ...settings, testFrontCrashPath: "/crash-front" });
      const t = await startTestServer({ env: { OFFPEAK_HTTP_THREADS: "1" } });
      setThreadSettings(settings);
      t.server.ctx.log.error = () => {}; // the failures are logged, on purpose
      try {
        expect((await fetch(t.url + "/healthz")).status).toBe(200);
        badPort = blocker.port; // the replacement's first listen fails: the port is taken
        await fetch(t.url + "/crash-front", { headers: { connection: "close" } }).catch(() => {});
        await Bun.sleep(500);
        badPort = 0;
        let status = 0;
        for (let i = 0; i < 60 && status !== 200; i++) {
          status = await fetch(t.url + "/healthz").then((r) => r.status, () => 0);
          if (status !== 200) await Bun.sleep(100);
        }
        expect(status).toBe(200);
      } finally {
        await t.stop();
      }
    });
    blocker.stop(true);
  });
});

describe("the port and the stop", () => {
  test("a port in use refuses the start, as without front threads", async () => {
    await expect(startTestServer({ argv: ["--port", String(fronted.server.port)], env: { OFFPEAK_HTTP_THREADS: "2" } })).rejects.toThrow();
  });

  test("a data directory too deep for a socket address: the relay socket goes in a 0700 folder of its own, removed at stop", async () => {
    const deep = join(mkdtempSync(join(dir, "deep-")), "d".repeat(100));
    // A temporary directory of this test's own (short, as a socket address needs): other test
    // processes make relay folders in the shared one at the same time.
    const own = mkdtempSync("/tmp/opr-");
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = own;
    let t: Awaited<ReturnType<typeof startTestServer>>;
    try {
      t = await startTestServer({ dataDir: deep, env: { OFFPEAK_HTTP_THREADS: "1" } });
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
    const made = readdirSync(own).filter((n) => n.startsWith("offpeak-relay-"));
    expect(made.length).toBe(1);
    expect(statSync(join(own, made[0]!)).mode & 0o777).toBe(0o700);
    expect((await t.api("/models")).status).toBe(200); // relayed
    await t.stop();
    expect(existsSync(join(own, made[0]!))).toBe(false);
    rmSync(own, { recursive: true, force: true });
  });

  test("a data directory with characters a header cannot hold: downloads from the disk still go from the file", async () => {
    const t = await startTestServer({ dataDir: join(mkdtempSync(join(dir, "wide-")), "数据"), env: { OFFPEAK_HTTP_THREADS: "1" } });
    try {
      const form = new FormData();
      form.append("purpose", "user_data");
      form.append("file", new Blob(["hello world"]), "f.txt");
      const made = (await (await t.api("/files", { method: "POST", body: form })).json()) as { id: string };
      const res = await t.api(`/files/${made.id}/content`);
      expect([res.status, res.headers.get("content-length"), await res.text()]).toEqual([200, "11", "hello world"]);
    } finally {
      await t.stop();
    }
  });

  test("stop: the port is closed and the relay socket removed", async () => {
    const t = await startTestServer({ env: { OFFPEAK_HTTP_THREADS: "1" } });
    const sock = join(t.dataDir, "relay.sock");
    expect(existsSync(sock)).toBe(true);
    expect((await fetch(t.url + "/healthz")).status).toBe(200);
    await t.stop();
    expect(existsSync(sock)).toBe(false);
    expect(await fetch(t.url + "/healthz").then(() => "answered", () => "refused")).toBe("refused");
  });
});

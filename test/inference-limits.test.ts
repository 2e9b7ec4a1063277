// docs/CONTRACT.md §7: per-key rpm/tpm (keys made through POST /keys with rate_limits,
// and the configured default) → 429 with retry-after and x-ratelimit-*
// headers, which every inference response of a limited key carries; a
// rejected request reaches no model and a bad one costs no quota. Each
// model's bounded queue: when full, 529 with retry-after at once (while the
// request ahead is still running), shown in GET /status as in_flight and
// queued; a queued client that gives up leaves the queue.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { APIError } from "openai";
import {
  configWriter,
  sleep,
  upstreamChunk,
  pushStream,
  deferred,
  eventually,
  expectError,
  json,
  jsonResponse,
  readAllSse,
  startScriptedUpstream,
  upstreamCompletion,
  within,
  type ScriptedUpstream,
  type UpstreamRequest,
} from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { clearOfMinuteEnd } from "./helpers/wait";

let t: TestServer;
let up: ScriptedUpstream;
const cfg = configWriter("offpeak-limits-");

beforeAll(async () => {
  up = await startScriptedUpstream({ models: ["gated-chat"] });
  const config = cfg.write("limits.json", {
    upstreams: [{ name: "gate", base_url: up.baseUrl, models: ["gated-chat", "tight-chat"], max_concurrency: 1, queue_size: 1 }],
    models: { "tight-chat": { max_concurrency: 1, queue_size: 0 } },
  });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await up?.stop();
  cfg.cleanup();
});
beforeEach(() => up.reset());

const chat = (key: string, content: string, extra: Record<string, unknown> = {}, model = "offpeak-echo", signal?: AbortSignal) =>
  t.api("/chat/completions", {
    method: "POST",
    key,
    signal,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content }], ...extra }),
  });

async function limitedKey(rate_limits: { rpm?: number; tpm?: number }, name = "limited") {
  await clearOfMinuteEnd(); // the test that uses it stays within one window
  const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, scopes: ["inference"], rate_limits }) });
  expect(res.status).toBe(200);
  const k = await json(res);
  expect(k.rate_limits).toEqual({ rpm: rate_limits.rpm ?? null, tpm: rate_limits.tpm ?? null });
  return k.key as string;
}

const chat_ = (key: string) => chat(key, "one two");

const RESET = /^\d+(\.\d+)?(ms|s|m)$/;

function requestHeaders(res: Response) {
  return {
    limit: res.headers.get("x-ratelimit-limit-requests"),
    remaining: res.headers.get("x-ratelimit-remaining-requests"),
    reset: res.headers.get("x-ratelimit-reset-requests"),
  };
}

async function expect429(res: Response) {
  const retryAfter = res.headers.get("retry-after");
  await expectError(res, 429, { type: "rate_limit_error", code: "rate_limit_exceeded" });
  expect(retryAfter).toMatch(/^\d+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(retryAfter)).toBeLessThanOrEqual(60);
}

describe("per-key rate limits", () => {
  test("rpm: x-ratelimit-*-requests count down on every answer; over the limit → 429 with retry-after", async () => {
    const key = await limitedKey({ rpm: 3 });
    const remaining: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await chat(key, `request ${i}`);
      expect(res.status).toBe(200);
      const h = requestHeaders(res);
      expect(h.limit).toBe("3");
      expect(h.reset).toMatch(RESET);
      remaining.push(h.remaining!);
      await res.arrayBuffer();
    }
    expect(remaining).toEqual(["2", "1", "0"]);
    const over = await chat(key, "one too many");
    expect(requestHeaders(over)).toEqual({ limit: "3", remaining: "0", reset: expect.stringMatching(RESET) });
    await expect429(over);
    // Still refused: a refused request is not a reason to let the next one through.
    await expect429(await chat(key, "again"));
    // Other keys are not affected.
    expect((await chat(t.admin, "admin is fine")).status).toBe(200);
    const other = await limitedKey({ rpm: 3 }, "other-limited");
    expect((await chat(other, "fresh key")).status).toBe(200);
  });

  test("answers refused before admission (400, unknown model) carry the headers too, and cost nothing", async () => {
    const key = await limitedKey({ rpm: 5, tpm: 100_000 });
    expect(requestHeaders(await chat(key, "first"))).toMatchObject({ limit: "5", remaining: "4" });
    const bad = [
      await chat(key, "x", { n: 0 }),
      await chat(key, "x", {}, "no-such-model"),
      await t.api("/embeddings", { method: "POST", key, headers: { "content-type": "application/json" }, body: "{not json" }),
    ];
    for (const res of bad) {
      expect(res.status === 400 || res.status === 404).toBe(true);
      expect(requestHeaders(res)).toEqual({ limit: "5", remaining: "4", reset: expect.stringMatching(RESET) });
      expect(res.headers.get("x-ratelimit-limit-tokens")).toBe("100000");
      await res.arrayBuffer();
    }
    expect(requestHeaders(await chat(key, "second")).remaining).toBe("3");
    // Not on answers about the key itself, and not on other routes.
    expect((await chat("sk-op-not-a-key-000000000000000000000000000000", "x")).headers.get("x-ratelimit-limit-requests")).toBeNull();
    expect((await t.api("/files/file-AAAAAAAAAAAAAAAAAAAAAAAA", { key })).headers.get("x-ratelimit-limit-requests")).toBeNull();
  });

  test("the SDK sees a RateLimitError (429)", async () => {
    const key = await limitedKey({ rpm: 1 });
    const client = t.sdk(key);
    await client.chat.completions.create({ model: "offpeak-echo", messages: [{ role: "user", content: "one" }] });
    let err: unknown;
    try {
      await client.chat.completions.create({ model: "offpeak-echo", messages: [{ role: "user", content: "two" }] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(429);
    expect((err as APIError).headers?.get("retry-after")).toMatch(/^\d+$/);
  });

  test("streamed chat, embeddings and chat sessions count and carry the headers too", async () => {
    const key = await limitedKey({ rpm: 4, tpm: 100_000 });
    const stream = await chat(key, "streamed", { stream: true });
    expect(stream.status).toBe(200);
    expect(requestHeaders(stream).remaining).toBe("3");
    expect(stream.headers.get("x-ratelimit-limit-tokens")).toBe("100000");
    expect(stream.headers.get("x-ratelimit-reset-tokens")).toMatch(RESET);
    await readAllSse(stream);

    const emb = await t.api("/embeddings", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-embed", input: "x" }) });
    expect(emb.status).toBe(200);
    expect(requestHeaders(emb).remaining).toBe("2");
    expect(emb.headers.get("x-ratelimit-limit-tokens")).toBe("100000");

    const made = await t.api("/chats", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-echo" }) });
    expect(made.status).toBe(200);
    const id = (await json(made)).id;
    const turn = await t.api(`/chats/${id}/stream`, { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "hello" }) });
    expect(turn.status).toBe(200);
    expect(requestHeaders(turn).remaining).toBe("1");
    await readAllSse(turn);

    expect((await chat(key, "last one")).status).toBe(200);
    // The limit is shared by every inference route.
    await expect429(await chat(key, "over", { stream: true }));
    await expect429(await t.api("/embeddings", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-embed", input: "x" }) }));
    await expect429(await t.api(`/chats/${id}/stream`, { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "over" }) }));
    // The refused turn stored nothing.
    const stored = await json(await t.api(`/chats/${id}`, { key }));
    expect(stored.messages.map((m: any) => m.content)).toEqual(["hello", "hello"]);
  });

  test("tpm: prompt and completion tokens count; over the limit → 429 with the -tokens headers", async () => {
    const key = await limitedKey({ tpm: 30 });
    // 8 words: 8 + 3 = 11 prompt tokens, 8 completion tokens.
    const text = "one two three four five six seven eight";
    const first = await chat(key, text);
    expect(first.status).toBe(200);
    const usage = (await json(first)).usage;
    expect(usage.prompt_tokens).toBe(11);
    expect(first.headers.get("x-ratelimit-limit-tokens")).toBe("30");
    expect(first.headers.get("x-ratelimit-reset-tokens")).toMatch(RESET);
    const remaining = Number(first.headers.get("x-ratelimit-remaining-tokens"));
    expect(remaining).toBeLessThanOrEqual(30 - usage.prompt_tokens);
    expect(remaining).toBeGreaterThanOrEqual(0);
    // No rpm on this key: no -requests headers.
    expect(first.headers.get("x-ratelimit-limit-requests")).toBeNull();
    // 19 used; another 11-token prompt fits (30), a third does not.
    expect((await chat(key, text, { max_tokens: 1 })).status).toBe(200);
    const over = await chat(key, text);
    expect(over.headers.get("x-ratelimit-limit-tokens")).toBe("30");
    expect(over.headers.get("x-ratelimit-remaining-tokens")).toBe("0");
    await expect429(over);
    // A single prompt larger than the whole budget is refused too.
    const big = await limitedKey({ tpm: 5 });
    await expect429(await chat(big, text));
  });

  test("tpm: a streamed upstream answer's reported completion tokens count (even with the number cut between chunks)", async () => {
    const key = await limitedKey({ tpm: 100 });
    up.handler = (r) => {
      const s = pushStream(r);
      (async () => {
        s.data(upstreamChunk("gated-chat", { role: "assistant", content: "hi" }));
        // The usage chunk, split in the middle of "completion_tokens":80.
        const usage = `data: ${JSON.stringify(upstreamChunk("gated-chat", {}, "stop", { usage: { prompt_tokens: 5, completion_tokens: 80, total_tokens: 85 } }))}\n\n`;
        const cut = usage.indexOf(":80") + 2;
        s.send(usage.slice(0, cut));
        await sleep(20);
        s.send(usage.slice(cut));
        s.send("data: [DONE]\n\n");
        s.close();
      })();
      return s.response;
    };
    const first = await chat(key, "one two", { stream: true, stream_options: { include_usage: true } }, "gated-chat");
    expect(first.status).toBe(200);
    await readAllSse(first);
    // 5 prompt tokens (2 words + 3) were counted at admission, 80 completion tokens at the end: 85 of 100.
    const next = await chat(key, "one two", {}, "offpeak-echo");
    expect(next.status).toBe(200);
    const remaining = Number(next.headers.get("x-ratelimit-remaining-tokens"));
    expect(remaining).toBeLessThanOrEqual(100 - 85 - 5);
    // And the next one over the budget is refused.
    await expect429(await chat(key, "one two three four five six seven eight nine ten eleven twelve"));
  });

  test("tpm: a streamed upstream answer without usage counts the tokens of its deltas (content and reasoning)", async () => {
    const key = await limitedKey({ tpm: 100 });
    const words = Array.from({ length: 30 }, (_, i) => `w${i}`);
    up.handler = (r) => {
      const s = pushStream(r);
      (async () => {
        s.data(upstreamChunk("gated-chat", { role: "assistant", reasoning_content: "think a b c d e f g h i" })); // 10 tokens
        // 30 words in 3 chunks, one event cut across two writes.
        for (let i = 0; i < 30; i += 10) {
          const ev = `data: ${JSON.stringify(upstreamChunk("gated-chat", { content: words.slice(i, i + 10).join(" ") + " " }))}\n\n`;
          s.send(ev.slice(0, 25));
          await sleep(5);
          s.send(ev.slice(25));
        }
        s.data(upstreamChunk("gated-chat", {}, "stop"));
        s.send("data: [DONE]\n\n");
        s.close();
      })();
      return s.response;
    };
    const first = await chat(key, "one two", { stream: true }, "gated-chat");
    expect(first.status).toBe(200);
    const { chunks } = await readAllSse(first);
    // Passed through untouched: no usage was asked for, none is added.
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe(words.join(" ") + " ");
    expect(chunks.some((c) => c.usage)).toBe(false);
    // 5 prompt tokens at admission + 40 completion tokens counted from the deltas; the next request's own prompt (5) too.
    const next = await chat(key, "one two", {}, "offpeak-echo");
    expect(next.status).toBe(200);
    const remaining = Number(next.headers.get("x-ratelimit-remaining-tokens"));
    expect(remaining).toBeLessThanOrEqual(100 - 45 - 5);
    expect(remaining).toBeGreaterThanOrEqual(100 - 45 - 5 - 10);
  });

  test("tpm: a chat-session stream counts its prompt (the whole history) and its reply", async () => {
    const key = await limitedKey({ tpm: 200 });
    const reply = Array.from({ length: 50 }, (_, i) => `r${i}`).join(" ");
    up.handler = (r) => {
      const s = pushStream(r);
      s.data(upstreamChunk("gated-chat", { role: "assistant", content: reply }));
      s.data(upstreamChunk("gated-chat", {}, "stop"));
      s.send("data: [DONE]\n\n");
      s.close();
      return s.response;
    };
    const chat = await json(await t.api("/chats", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "gated-chat" }) }));
    const res = await t.api(`/chats/${chat.id}/stream`, { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "one two three" }) });
    expect(res.status).toBe(200);
    // Admission: 3 words + 3 = 6 prompt tokens.
    expect(Number(res.headers.get("x-ratelimit-remaining-tokens"))).toBe(200 - 6);
    await readAllSse(res);
    // Then the 50-token reply; the next request's own prompt (2 words + 3 = 5) too.
    const next = await chat_(key);
    expect(Number(next.headers.get("x-ratelimit-remaining-tokens"))).toBe(200 - 6 - 50 - 5);
  });

  test("a rate-limited request never reaches the upstream", async () => {
    const key = await limitedKey({ rpm: 1 });
    up.handler = (r) => jsonResponse(upstreamCompletion(r.body));
    expect((await chat(key, "passes", {}, "gated-chat")).status).toBe(200);
    await expect429(await chat(key, "stopped", {}, "gated-chat"));
    expect(up.requests.map((r) => r.body.messages[0].content)).toEqual(["passes"]);
  });

  test("bad requests (400/404) cost no quota", async () => {
    const key = await limitedKey({ rpm: 2 });
    for (const extra of [{ n: 0 }, { max_tokens: -1 }, { model: "no-such-model" }]) {
      const res = await chat(key, "bad", extra);
      expect([400, 404]).toContain(res.status);
      await res.arrayBuffer();
    }
    const emb = await t.api("/embeddings", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-embed", input: "x", dimensions: 0 }) });
    expect(emb.status).toBe(400);
    const a = await chat(key, "good one");
    expect(a.status).toBe(200);
    expect(requestHeaders(a).remaining).toBe("1");
    expect((await chat(key, "good two")).status).toBe(200);
    await expect429(await chat(key, "third"));
  });

  test("upstream errors passed back to a limited key carry the headers too", async () => {
    const key = await limitedKey({ rpm: 10 });
    up.handler = () => jsonResponse({ error: { message: "bad temperature", type: "invalid_request_error", param: "temperature", code: null } }, 400);
    const res = await chat(key, "x", {}, "gated-chat");
    expect(res.status).toBe(400);
    expect(requestHeaders(res)).toEqual({ limit: "10", remaining: "9", reset: expect.stringMatching(RESET) });
    up.handler = () => jsonResponse({ error: { message: "down", type: "server_error", param: null, code: null } }, 500);
    const res502 = await chat(key, "x", {}, "gated-chat");
    expect(res502.status).toBe(502);
    expect(requestHeaders(res502).remaining).toBe("8");
  });

  test("the configured default rpm applies to keys without their own limit (admin included)", async () => {
    await clearOfMinuteEnd();
    const s = await startTestServer({ env: { OFFPEAK_RPM: "2", OFFPEAK_BATCH_WORKERS: "1" } });
    try {
      const send = (key = s.admin) =>
        s.api("/chat/completions", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] }) });
      const a = await send();
      expect(requestHeaders(a)).toEqual({ limit: "2", remaining: "1", reset: expect.stringMatching(RESET) });
      expect((await send()).status).toBe(200);
      await expect429(await send());
      // A key's own limit wins over the default.
      const own = await s.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "own", rate_limits: { rpm: 5 } }) });
      const ownKey = (await json(own)).key;
      const r = await send(ownKey);
      expect(requestHeaders(r).limit).toBe("5");
    } finally {
      await s.stop();
    }
  });
});

describe("bounded per-model queue", () => {
  /** Holds every upstream request until the test releases it. */
  function holdAll() {
    const held: { r: UpstreamRequest; release: () => void }[] = [];
    const arrived: ((n: number) => void)[] = [];
    up.handler = async (r) => {
      const gate = deferred();
      held.push({ r, release: () => gate.resolve() });
      for (const a of arrived.splice(0)) a(held.length);
      await Promise.race([gate.promise, r.gone]);
      return jsonResponse(upstreamCompletion(r.body));
    };
    return {
      held,
      /** Resolves once `n` requests have reached the upstream. */
      until: (n: number) =>
        within(
          new Promise<void>((resolve) => {
            const check = () => (held.length >= n ? resolve() : arrived.push(check));
            check();
          }),
          5000,
          `${n} request(s) to reach the upstream`,
        ),
    };
  }

  const stats = async (model: string) => {
    const m = (await json(await t.api("/status"))).models.find((x: any) => x.id === model);
    return { in_flight: m.in_flight, queued: m.queued };
  };

  test("max_concurrency 1, queue_size 1: the third request gets 529 at once, while the first is still running", async () => {
    const gate = holdAll();
    const a = chat(t.admin, "A", {}, "gated-chat");
    await gate.until(1);
    const b = chat(t.admin, "B", {}, "gated-chat");
    await eventually(async () => (await stats("gated-chat")).queued === 1, "B to be queued");
    expect(await stats("gated-chat")).toEqual({ in_flight: 1, queued: 1 });
    // B waits in offpeak, not at the upstream.
    expect(gate.held.length).toBe(1);

    const c = await within(chat(t.admin, "C", {}, "gated-chat"), 5000, "C to be refused at once");
    const retryAfter = c.headers.get("retry-after");
    await expectError(c, 529, { type: "overloaded_error", code: "overloaded" });
    expect(retryAfter).toMatch(/^\d+$/);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    // The answer came while A was still held by the upstream.
    expect(gate.held[0]!.r.isGone()).toBe(false);
    // Streamed requests and the SDK get the same.
    await expectError(await chat(t.admin, "C2", { stream: true }, "gated-chat"), 529, { code: "overloaded" });
    let err: unknown;
    try {
      await t.sdk().chat.completions.create({ model: "gated-chat", messages: [{ role: "user", content: "C3" }] });
    } catch (e) {
      err = e;
    }
    expect((err as APIError).status).toBe(529);

    gate.held[0]!.release();
    const ra = await a;
    expect(ra.status).toBe(200);
    expect((await json(ra)).choices[0].message.content).toBe("A");
    await gate.until(2);
    expect(gate.held[1]!.r.body.messages[0].content).toBe("B");
    gate.held[1]!.release();
    const rb = await b;
    expect(rb.status).toBe(200);
    expect((await json(rb)).choices[0].message.content).toBe("B");
    // Only A and B ever reached the upstream.
    expect(up.requests.map((r) => r.body.messages[0].content)).toEqual(["A", "B"]);
    expect(await stats("gated-chat")).toEqual({ in_flight: 0, queued: 0 });
  });

  test("queue_size 0: a busy model refuses at once", async () => {
    const gate = holdAll();
    const a = chat(t.admin, "A0", {}, "tight-chat");
    await gate.until(1);
    await expectError(await within(chat(t.admin, "B0", {}, "tight-chat"), 5000, "B0 to be refused"), 529, { code: "overloaded" });
    await expectError(await t.api("/embeddings", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tight-chat", input: "x" }) }), 529);
    gate.held[0]!.release();
    expect((await a).status).toBe(200);
    expect(await stats("tight-chat")).toEqual({ in_flight: 0, queued: 0 });
  });

  test("a 529 costs no quota: a limited key refused by a busy model keeps its requests", async () => {
    const key = await limitedKey({ rpm: 2 }, "busy-model");
    const gate = holdAll();
    const a = chat(t.admin, "A2", {}, "tight-chat");
    await gate.until(1);
    for (let i = 0; i < 3; i++) {
      const res = await chat(key, `refused ${i}`, {}, "tight-chat");
      expect(requestHeaders(res)).toEqual({ limit: "2", remaining: "2", reset: expect.stringMatching(RESET) });
      await expectError(res, 529, { code: "overloaded" });
    }
    gate.held[0]!.release();
    expect((await a).status).toBe(200);
    up.handler = (r) => jsonResponse(upstreamCompletion(r.body));
    const first = await chat(key, "now 1", {}, "tight-chat");
    expect(first.status).toBe(200);
    expect(requestHeaders(first).remaining).toBe("1");
    expect((await chat(key, "now 2", {}, "tight-chat")).status).toBe(200);
    await expect429(await chat(key, "now 3", {}, "tight-chat"));
  });

  test("a queued client that gives up leaves the queue: it never reaches the upstream and frees its place", async () => {
    const gate = holdAll();
    const a = chat(t.admin, "A1", {}, "gated-chat");
    await gate.until(1);
    const abort = new AbortController();
    const b = chat(t.admin, "B1", {}, "gated-chat", abort.signal).catch((e) => e);
    await eventually(async () => (await stats("gated-chat")).queued === 1, "B1 to be queued");
    abort.abort();
    expect(((await b) as Error).name).toBe("AbortError");
    await eventually(async () => (await stats("gated-chat")).queued === 0, "B1 to leave the queue");
    // Its place is free: C1 is queued instead of refused.
    const c = chat(t.admin, "C1", {}, "gated-chat");
    await eventually(async () => (await stats("gated-chat")).queued === 1, "C1 to be queued");
    gate.held[0]!.release();
    expect((await a).status).toBe(200);
    await gate.until(2);
    gate.held[1]!.release();
    const rc = await c;
    expect(rc.status).toBe(200);
    expect(up.requests.map((r) => r.body.messages[0].content)).toEqual(["A1", "C1"]);
    expect(await stats("gated-chat")).toEqual({ in_flight: 0, queued: 0 });
  });
});

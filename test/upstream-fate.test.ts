// The one classifier of upstream calls (src/inference/upstream/fate.ts) and
// the one transport (transport.ts): a table of answers, network errors, the
// strict client's errors and retry-after values; the fates real failures get
// from both clients; how a fate is reported to the upstream's health; which
// client carries a model's calls; the one GET /models.
import { afterAll, beforeAll, describe as group, expect, test } from "bun:test";
import { OwnAnswer } from "../src/inference/upstream/answer";
import { Deadline } from "../src/inference/upstream/deadline";
import { ANSWER, CallFailure, INVALID_ANSWER, classify, describe, failureLabel, retryAfterMs, type Fate } from "../src/inference/upstream/fate";
import { FAIL_THRESHOLD, SUSPECT, UP, newHealthMemory, pausedFor, reportFailure, reportFate, stateOf, windowOf, report429, tryEnterWindow } from "../src/inference/upstream/health";
import { UpstreamConnectionError, UpstreamProtocolError } from "../src/inference/upstream/httpClient";
import { getModels, ownClientFor, postJson } from "../src/inference/upstream/transport";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { freePort } from "./helpers/env";

const answer = (status: number, headers: Record<string, string> = {}) => new OwnAnswer(status, Object.entries(headers), new Uint8Array(), null);
const fetchError = (code: string) => Object.assign(new TypeError(`${code}: fetch failed`), { code });

group("classify: answers by status", () => {
  const table: [number, Partial<Fate> & { kind: Fate["kind"] }][] = [
    [200, { kind: "answer" }],
    [201, { kind: "answer" }],
    [204, { kind: "answer" }],
    [299, { kind: "answer" }],
    [301, { kind: "request_error", retry: false }],
    [400, { kind: "request_error", retry: false }],
    [401, { kind: "request_error", retry: false }],
    [403, { kind: "request_error", retry: false }],
    [404, { kind: "request_error", retry: false }],
    [408, { kind: "request_error", retry: true }],
    [409, { kind: "request_error", retry: true }],
    [413, { kind: "request_error", retry: false }],
    [422, { kind: "request_error", retry: false }],
    [429, { kind: "rate_limited" }],
    [500, { kind: "request_error", retry: true }],
    [501, { kind: "request_error", retry: true }],
    [502, { kind: "engine_failure", cause: "status" }],
    [503, { kind: "engine_failure", cause: "status" }],
    [504, { kind: "engine_failure", cause: "status" }],
    [505, { kind: "request_error", retry: true }],
    [599, { kind: "request_error", retry: true }],
  ];
  for (const [status, want] of table)
    test(`${status} → ${want.kind}${"retry" in want ? (want.retry ? ", retried" : ", final") : ""}`, () => {
      const fate = classify(answer(status));
      expect(fate).toMatchObject(want);
      if (fate.kind === "request_error" || (fate.kind === "engine_failure" && fate.cause === "status")) expect(fate.status).toBe(status);
    });

  test("a 2xx is the shared ANSWER (nothing allocated); with a body that is not JSON, INVALID_ANSWER; the body does not matter for other statuses", () => {
    expect(classify(answer(200))).toBe(ANSWER);
    expect(classify(answer(200), false)).toBe(INVALID_ANSWER);
    expect(classify(answer(500), false)).toMatchObject({ kind: "request_error", retry: true });
    expect(classify(answer(503), false)).toMatchObject({ kind: "engine_failure" });
  });

  test("retry-after travels with every failed answer, never with an answer", () => {
    expect(classify(answer(429, { "retry-after": "3" }))).toEqual({ kind: "rate_limited", retryAfterMs: 3000 });
    expect(classify(answer(503, { "retry-after-ms": "250" }))).toMatchObject({ kind: "engine_failure", retryAfterMs: 250 });
    expect(classify(answer(500, { "retry-after": "1" }))).toMatchObject({ kind: "request_error", retryAfterMs: 1000 });
    expect(classify(answer(429))).toEqual({ kind: "rate_limited", retryAfterMs: null });
    expect(classify(answer(200, { "retry-after": "5" }))).toBe(ANSWER);
  });
});

group("classify: calls that threw", () => {
  const table: [string, CallFailure, Partial<Fate>][] = [
    ["fetch: connection refused", new CallFailure(fetchError("ECONNREFUSED")), { kind: "engine_failure", cause: "refused", status: null }],
    ["fetch: connection reset", new CallFailure(fetchError("ECONNRESET")), { kind: "engine_failure", cause: "connection" }],
    ["fetch: a malformed answer", new CallFailure(fetchError("Malformed_HTTP_Response")), { kind: "engine_failure", cause: "malformed" }],
    ["AbortSignal.timeout's TimeoutError", new CallFailure(new DOMException("timed out", "TimeoutError")), { kind: "engine_failure", cause: "timeout" }],
    ["the call's deadline fired (whatever the error)", new CallFailure(new DOMException("aborted", "AbortError"), true), { kind: "engine_failure", cause: "timeout" }],
    ["own client: refused", new CallFailure(new UpstreamConnectionError("Failed to connect", "ECONNREFUSED")), { kind: "engine_failure", cause: "refused" }],
    ["own client: closed without answering", new CallFailure(new UpstreamConnectionError("upstream closed the connection without answering")), { kind: "engine_failure", cause: "connection" }],
    ["own client: refused its answer (llhttp rules)", new CallFailure(new UpstreamProtocolError("upstream sent an invalid Content-Length")), { kind: "engine_failure", cause: "malformed" }],
    ["anything else thrown", new CallFailure(new Error("boom")), { kind: "engine_failure", cause: "connection" }],
    ["a non-Error thrown", new CallFailure("boom"), { kind: "engine_failure", cause: "connection", detail: "boom" }],
    ["the client went away (even if the deadline fired too)", new CallFailure(new DOMException("aborted", "AbortError"), true, true), { kind: "cancelled" }],
  ];
  for (const [name, failure, want] of table) test(name, () => expect(classify(failure)).toMatchObject(want));
});

test("retry-after parsing: -ms first, then seconds or an HTTP date; unreadable or absent is null", () => {
  const h = (o: Record<string, string>) => answer(429, o).headers;
  const now = Date.parse("2026-01-01T00:00:00Z");
  expect(retryAfterMs(h({ "retry-after-ms": "1500" }), now)).toBe(1500);
  expect(retryAfterMs(h({ "retry-after-ms": "12.5" }), now)).toBe(12.5);
  expect(retryAfterMs(h({ "retry-after-ms": "300", "retry-after": "9" }), now)).toBe(300);
  expect(retryAfterMs(h({ "retry-after-ms": "soon", "retry-after": "2" }), now)).toBe(2000);
  expect(retryAfterMs(h({ "retry-after": "0" }), now)).toBe(0);
  expect(retryAfterMs(h({ "retry-after": "1.5" }), now)).toBe(1500);
  expect(retryAfterMs(new Headers({ "Retry-After": "7" }), now)).toBe(7000); // a fetch Response's headers
  expect(retryAfterMs(h({ "retry-after": "Thu, 01 Jan 2026 00:00:30 GMT" }), now)).toBe(30_000);
  expect(retryAfterMs(h({ "retry-after": "Wed, 31 Dec 2025 23:59:00 GMT" }), now)).toBe(0);
  expect(retryAfterMs(h({ "retry-after": "later" }), now)).toBeNull();
  expect(retryAfterMs(h({}), now)).toBeNull();
});

test("describe and failureLabel: the words and the metric label of each fate", () => {
  const p = "/chat/completions";
  expect(describe(classify(answer(503)), p, 1000)).toBe("answered HTTP 503 to POST /chat/completions");
  expect(describe(classify(answer(500)), p, 1000)).toBe("answered HTTP 500 to POST /chat/completions");
  expect(describe(classify(new CallFailure(new Error("x"), true)), p, 1000)).toBe("timed out after 1000 ms");
  expect(describe(classify(new CallFailure(fetchError("ECONNREFUSED"))), p, 1000)).toBe("unreachable: ECONNREFUSED: fetch failed");
  expect(describe(classify(new CallFailure(new UpstreamProtocolError("upstream sent a bad head"))), p, 1000)).toBe("sent a malformed answer: sent a bad head");
  expect(describe(ANSWER, p, 1000)).toBe("");
  expect(failureLabel(ANSWER)).toBeNull();
  expect(failureLabel(INVALID_ANSWER)).toBeNull();
  expect(failureLabel(classify(answer(429)))).toBe(429);
  expect(failureLabel(classify(answer(404)))).toBe(404);
  expect(failureLabel(classify(answer(502)))).toBe(502);
  expect(failureLabel(classify(new CallFailure(new Error("x"), true)))).toBe("timeout");
  expect(failureLabel(classify(new CallFailure(new UpstreamProtocolError("x"))))).toBe("connection");
  expect(failureLabel(classify(new CallFailure(fetchError("ECONNREFUSED"))))).toBe("connection");
});

group("reportFate: a fate as the upstream's health sees it", () => {
  const U = 3;
  test("engine failures in a row make it suspect once (the caller then has it probed); an answer of any other kind ends the streak", () => {
    const mem = newHealthMemory();
    const fail = classify(answer(502));
    for (let i = 1; i < FAIL_THRESHOLD; i++) expect(reportFate(mem, U, fail, true)).toBe(false);
    expect(reportFate(mem, U, classify(answer(400)), true)).toBe(false); // about the request: the streak ends
    for (let i = 1; i < FAIL_THRESHOLD; i++) expect(reportFate(mem, U, classify(new CallFailure(fetchError("ECONNRESET"))), false)).toBe(false);
    expect(stateOf(mem, U)).toBe(UP);
    expect(reportFate(mem, U, fail, false)).toBe(true);
    expect(stateOf(mem, U)).toBe(SUSPECT);
    expect(reportFate(mem, U, fail, false)).toBe(false); // suspect already: nobody else probes again
  });

  test("500s, invalid answers and cancelled calls never count toward a failure streak", () => {
    const mem = newHealthMemory();
    for (let i = 0; i < 2 * FAIL_THRESHOLD; i++) {
      reportFate(mem, U, classify(answer(500)), true);
      reportFate(mem, U, INVALID_ANSWER, true);
      reportFate(mem, U, classify(new CallFailure(new Error("gone"), false, true)), false);
    }
    expect(stateOf(mem, U)).toBe(UP);
    // ...and a cancelled call does not end one either.
    for (let i = 1; i < FAIL_THRESHOLD; i++) reportFailure(mem, U);
    reportFate(mem, U, classify(new CallFailure(new Error("gone"), false, true)), false);
    expect(reportFailure(mem, U)).toBe(true);
  });

  test("a 429 pauses the batch dispatch for its retry-after and halves the window", () => {
    const mem = newHealthMemory();
    for (let i = 0; i < 8; i++) tryEnterWindow(mem, U);
    reportFate(mem, U, classify(answer(429, { "retry-after": "2" })), true);
    expect(pausedFor(mem, U)).toBeGreaterThan(1500);
    expect(windowOf(mem, U).window).toBe(4);
  });

  test("a batch answer lets a window held down by 429s grow back; an interactive one does not", () => {
    for (const [batch, grows] of [
      [true, true],
      [false, false],
    ] as const) {
      const mem = newHealthMemory();
      for (let i = 0; i < 4; i++) tryEnterWindow(mem, U);
      report429(mem, U, 0, 1000);
      const w = windowOf(mem, U).window!;
      for (let i = 0; i < w; i++) reportFate(mem, U, ANSWER, batch);
      expect(windowOf(mem, U).window).toBe(grows ? w + 1 : w);
    }
  });
});

group("the transport", () => {
  let up: FakeUpstream;
  beforeAll(async () => {
    up = await startFakeUpstream({ models: ["m-1", "m-2"] });
  });
  afterAll(() => up.stop());

  test("ownClientFor: the own client for plain http with upstream_client builtin; fetch for https, a proxy, or upstream_client fetch", () => {
    expect(ownClientFor("http://127.0.0.1:8000/v1", "builtin", {})).toBe(true);
    expect(ownClientFor("http://127.0.0.1:8000/v1", "fetch", {})).toBe(false);
    expect(ownClientFor("https://api.openai.com/v1", "builtin", {})).toBe(false);
    expect(ownClientFor("http://127.0.0.1:8000/v1", "builtin", { HTTP_PROXY: "http://proxy:3128" })).toBe(false);
  });

  test("postJson goes through the client the target names, with the same answer", async () => {
    const agents: string[] = [];
    const srv = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(req) {
        agents.push(req.headers.get("user-agent") ?? "");
        return Response.json({ got: await req.json(), auth: req.headers.get("authorization") });
      },
    });
    try {
      for (const ownClient of [true, false]) {
        const d = new Deadline(5000);
        const res = await postJson({ baseUrl: `http://127.0.0.1:${srv.port}/v1`, apiKey: "k", ownClient }, "/chat/completions", '{"a":1}', d);
        expect(res.status).toBe(200);
        expect(JSON.parse(await res.text())).toEqual({ got: { a: 1 }, auth: "Bearer k" });
        d.clear();
      }
      expect(agents[0]).toBe("offpeak");
      expect(agents[1]).toMatch(/^Bun\//);
    } finally {
      srv.stop(true);
    }
  });

  test("real failures get the same fate from either client: refused, malformed, timed out", async () => {
    const closed = freePort();
    const garbage = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: (s) => void (s.write("HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}"), s.end()) } });
    const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: () => {} } });
    const fateOf = async (baseUrl: string, ownClient: boolean, ms = 5000): Promise<Fate> => {
      const d = new Deadline(ms);
      try {
        const res = await postJson({ baseUrl, apiKey: null, ownClient }, "/x", "{}", d);
        await res.text();
        return classify(res);
      } catch (e) {
        return classify(new CallFailure(e, d.timedOut));
      } finally {
        d.clear();
      }
    };
    try {
      for (const own of [true, false]) {
        expect(await fateOf(`http://127.0.0.1:${closed}`, own)).toMatchObject({ kind: "engine_failure", cause: "refused" });
        expect(await fateOf(`http://127.0.0.1:${garbage.port}`, own)).toMatchObject({ kind: "engine_failure", cause: "malformed" });
        expect(await fateOf(`http://127.0.0.1:${silent.port}`, own, 60)).toMatchObject({ kind: "engine_failure", cause: "timeout" });
      }
    } finally {
      garbage.stop(true);
      silent.stop(true);
    }
  });

  test("getModels: the ids listed; a body that is no list; an HTTP failure; a refused connection", async () => {
    expect(await getModels(up.baseUrl + "/", null, 5000)).toEqual({ ok: true, ids: ["m-1", "m-2"] });
    const odd = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (req) => {
        const path = new URL(req.url).pathname;
        if (path === "/a/models") return new Response("<html>");
        if (path === "/c/models") return Response.json({ data: [{ id: "ok" }, { id: 7 }, {}, null] });
        return new Response("no", { status: 503 });
      },
    });
    try {
      expect(await getModels(`http://127.0.0.1:${odd.port}/a`, null, 5000)).toEqual({ ok: true, ids: null });
      expect(await getModels(`http://127.0.0.1:${odd.port}/c`, null, 5000)).toEqual({ ok: true, ids: ["ok"] });
      const failed = await getModels(`http://127.0.0.1:${odd.port}/b`, null, 5000);
      expect(failed).toMatchObject({ ok: false, fate: { kind: "engine_failure", status: 503 }, error: "GET /models answered HTTP 503" });
    } finally {
      odd.stop(true);
    }
    const refused = await getModels(`http://127.0.0.1:${freePort()}`, null, 5000);
    expect(refused).toMatchObject({ ok: false, fate: { kind: "engine_failure", cause: "refused" } });
    expect(refused.ok || refused.error.startsWith("GET /models: ")).toBe(true);
  });
});

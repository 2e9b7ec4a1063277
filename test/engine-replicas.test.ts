// The engine replica model (test/helpers/engineReplicas.ts) that the tests and
// benchmarks of docs/CONTRACT.md §21 run against: its waiting queue's
// priority order, its prefix cache (the work a hit saves, LRU eviction), its
// vLLM-named /metrics, its answers (plain and streamed, naming the replica),
// and kill/restart on the same port. Nothing here judges wall time: the
// tests compare counts and the work the model computes.
import { afterEach, describe, expect, test } from "bun:test";
import { parseMetrics } from "./helpers/outage";
import { prefixOf, promptOf, startEngineReplica, startEngineReplicas, workOf, type EngineReplica, type EngineReplicas, replicaShape } from "./helpers/engineReplicas";
import { waitFor } from "./helpers/wait";

const MODEL = "engine-chat";
let started: (EngineReplica | EngineReplicas)[] = [];
afterEach(async () => {
  await Promise.all(started.map((r) => r.stop()));
  started = [];
});

async function replica(shape: Parameters<typeof startEngineReplica>[0] = {}, index = 0): Promise<EngineReplica> {
  const r = await startEngineReplica({ decodeMs: 5, prefillMsPerKChar: 5, ...shape }, { index, models: [MODEL] });
  started.push(r);
  return r;
}

const body = (system: string | null, user: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [...(system === null ? [] : [{ role: "system", content: system }]), { role: "user", content: user }],
  max_tokens: 8,
  ...extra,
});

const post = (r: { baseUrl: string }, b: unknown) =>
  fetch(`${r.baseUrl}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(b) });

/** A system prompt of `n` characters that starts with `tag`. */
const sys = (tag: string, n = 4000) => (tag + " ").padEnd(n, `${tag} is a long system prompt. `);

describe("the waiting queue", () => {
  test("requests wait in priority order (lower first), first come first served within one priority", async () => {
    const r = await replica({ maxRunning: 1 });
    r.pause();
    const answers: Promise<Response>[] = [post(r, body(null, "blocker"))];
    await waitFor(() => r.stats().running === 1, "the first request running");
    // One at a time, so that their order of arrival is the order sent.
    const priorities = [5, 1, 3, 1, 0, 5];
    for (const [i, priority] of priorities.entries()) {
      answers.push(post(r, body(null, `q${i}`, { priority })));
      await waitFor(() => r.stats().waiting === i + 1, `request ${i} waiting`);
    }
    expect(r.stats()).toMatchObject({ running: 1, waiting: 6, inFlight: 7, peakInFlight: 7 });
    r.resume();
    const res = await Promise.all(answers);
    expect(res.map((x) => x.status)).toEqual([200, 200, 200, 200, 200, 200, 200]);
    // Arrival order: the blocker is 1, priorities[i] is i + 2.
    expect(r.admissions().map((a) => [a.seq, a.priority])).toEqual([
      [1, 0],
      [6, 0],
      [3, 1],
      [5, 1],
      [4, 3],
      [2, 5],
      [7, 5],
    ]);
    expect(r.stats()).toMatchObject({ seen: 7, answered: 7, inFlight: 0, byPriority: { "0": 2, "1": 2, "3": 1, "5": 2 } });
  });

  test("with preempt, a request of a lower priority value takes a full batch's place from the running one of the highest value", async () => {
    const r = await replica({ maxRunning: 2, preempt: true });
    r.pause();
    const answers = [post(r, body(null, "batch a", { priority: 5 })), post(r, body(null, "batch b", { priority: 5 }))];
    await waitFor(() => r.stats().running === 2, "two batch requests running");
    answers.push(post(r, body(null, "interactive")));
    await waitFor(() => r.stats().preempted === 1, "one preemption");
    // The later of the two equals went back to the queue; the interactive one runs.
    expect(r.stats()).toMatchObject({ running: 2, waiting: 1 });
    // A request of the same priority as the running ones preempts nothing.
    answers.push(post(r, body(null, "batch c", { priority: 5 })));
    await waitFor(() => r.stats().waiting === 2, "batch c waiting");
    r.resume();
    expect((await Promise.all(answers)).map((x) => x.status)).toEqual([200, 200, 200, 200]);
    expect(r.admissions().map((a) => [a.seq, a.priority])).toEqual([
      [1, 5],
      [2, 5],
      [3, 0],
      [2, 5],
      [4, 5],
    ]);
    expect(r.stats()).toMatchObject({ preempted: 1, answered: 4, misses: 5 });
  });

  test("at most maxRunning run; from maxQueued held a new request is answered 503 at once", async () => {
    const r = await replica({ maxRunning: 2, maxQueued: 3 });
    r.pause();
    const answers = [0, 1, 2].map((i) => post(r, body(null, `q${i}`)));
    await waitFor(() => r.stats().inFlight === 3, "three requests held");
    expect(r.stats()).toMatchObject({ running: 2, waiting: 1 });
    const refused = await post(r, body(null, "one too many"));
    expect(refused.status).toBe(503);
    r.resume();
    expect((await Promise.all(answers)).map((x) => x.status)).toEqual([200, 200, 200]);
    expect(r.stats()).toMatchObject({ seen: 4, answered: 3, rejected: 1, peakInFlight: 3 });
  });
});

describe("the prefix cache", () => {
  test("a request's prefix is its system message, or the first prefixChars characters of its prompt", () => {
    const shape = replicaShape({ prefixChars: 10 });
    expect(promptOf(body("S", "hello"))).toBe("S\nhello");
    expect(prefixOf(body("abc", "hello"), shape)).toEqual({ key: `${MODEL}\u0000abc`, prefixChars: 3, restChars: 6 });
    expect(prefixOf(body(null, "0123456789abcdef"), shape)).toEqual({ key: `${MODEL}\u00000123456789`, prefixChars: 10, restChars: 6 });
    // Text parts count as text; the model is part of the key.
    const parts = { model: "other", messages: [{ role: "system", content: [{ type: "text", text: "ab" }, { type: "text", text: "c" }] }, { role: "user", content: "x" }] };
    expect(prefixOf(parts, shape).key).toBe("other\u0000abc");
  });

  test("a hit skips the configured share of the prefix's prefill, and is counted", async () => {
    const shape = { decodeMs: 10, prefillMsPerKChar: 20, hitSaving: 0.75 };
    const r = await replica(shape);
    const b = body(sys("alpha"), "what is 2 + 2?");
    const first = await post(r, b);
    const second = await post(r, b);
    expect([first.headers.get("x-prefix-cache"), second.headers.get("x-prefix-cache")]).toEqual(["miss", "hit"]);
    const [missWork, hitWork] = [Number(first.headers.get("x-work-ms")), Number(second.headers.get("x-work-ms"))];
    // 4000 prefix characters and "\n" + 14 after them.
    const full = replicaShape(shape);
    expect(missWork).toBeCloseTo(10 + (20 * 4015) / 1000, 9);
    expect(hitWork).toBeCloseTo(workOf(full, { prefixChars: 4000, restChars: 15 }, true), 9);
    expect(missWork - hitWork).toBeCloseTo((20 * 4000 * 0.75) / 1000, 9);
    expect(r.stats()).toMatchObject({ hits: 1, misses: 1, answered: 2 });
    expect(r.stats().workMs).toBeCloseTo(missWork + hitWork, 9);
    // With the defaults, prefill dominates a request with a long system prompt: a hit needs a fifth of a miss's work.
    const d = replicaShape();
    expect(workOf(d, { prefixChars: 4000, restChars: 0 }, false) / workOf(d, { prefixChars: 4000, restChars: 0 }, true)).toBeCloseTo(5, 9);
  });

  test("the cache holds cachePrefixes prefixes, evicting the least recently used", async () => {
    const r = await replica({ cachePrefixes: 2 });
    const seen: string[] = [];
    for (const tag of ["A", "B", "A", "C", "B", "A", "B"]) {
      const res = await post(r, body(sys(tag, 200), "q"));
      seen.push(`${tag}:${res.headers.get("x-prefix-cache")}`);
    }
    // A B A(hit) → [B, A]; C evicts B → [A, C]; B evicts A → [C, B]; A evicts C → [B, A]; B hits → [A, B].
    expect(seen).toEqual(["A:miss", "B:miss", "A:hit", "C:miss", "B:miss", "A:miss", "B:hit"]);
    expect(r.cacheKeys().map((k) => k.split("\u0000")[1]!.split(" ")[0])).toEqual(["A", "B"]);
    expect(r.stats()).toMatchObject({ hits: 2, misses: 5 });
  });

  test("requests that start together with the same new prefix both miss; reset() empties the cache", async () => {
    const r = await replica({ maxRunning: 4 });
    r.pause();
    const both = [post(r, body(sys("D", 500), "1")), post(r, body(sys("D", 500), "2"))];
    await waitFor(() => r.stats().running === 2, "both running");
    r.resume();
    expect((await Promise.all(both)).map((x) => x.headers.get("x-prefix-cache"))).toEqual(["miss", "miss"]);
    expect((await post(r, body(sys("D", 500), "3"))).headers.get("x-prefix-cache")).toBe("hit");
    r.reset({ keepCache: true });
    expect(r.cacheKeys().length).toBe(1);
    expect(r.stats()).toMatchObject({ hits: 0, misses: 0, seen: 0 });
    r.reset();
    expect(r.cacheKeys()).toEqual([]);
    expect((await post(r, body(sys("D", 500), "4"))).headers.get("x-prefix-cache")).toBe("miss");
  });
});

describe("metrics and answers", () => {
  test("GET /metrics has vLLM's names, labelled with the model, and parses", async () => {
    const r = await replica({ maxRunning: 2 });
    await post(r, body(sys("M", 400), "x"));
    await post(r, body(sys("M", 400), "x"));
    r.pause();
    const held = [0, 1, 2].map((i) => post(r, body(null, `p${i}`)));
    await waitFor(() => r.stats().inFlight === 3, "three held");
    const text = await fetch(`http://127.0.0.1:${r.port}/metrics`).then((x) => x.text());
    const m = parseMetrics(text);
    const l = `{model_name="${MODEL}"}`;
    expect(m.get(`vllm:num_requests_running${l}`)).toBe(2);
    expect(m.get(`vllm:num_requests_waiting${l}`)).toBe(1);
    expect(m.get(`vllm:gpu_cache_usage_perc${l}`)).toBe(1);
    expect(m.get(`vllm:kv_cache_usage_perc${l}`)).toBe(1);
    // Tokens of 4 characters: two prompts of 400 + 2, one hit of 400, and two short prompts started since.
    expect(m.get(`vllm:prefix_cache_hits_total${l}`)).toBe(100);
    expect(m.get(`vllm:prefix_cache_queries_total${l}`)).toBe(2 * 101 + 2 * 1);
    for (const name of ["vllm:num_requests_running", "vllm:prefix_cache_hits_total"]) expect(text).toContain(`# TYPE ${name} ${name.endsWith("_total") ? "counter" : "gauge"}`);
    r.resume();
    await Promise.all(held);
    expect(parseMetrics(r.metricsText()).get(`vllm:num_requests_running${l}`)).toBe(0);
  });

  test("GET /v1/models; answers name the replica; streamed answers; an unknown model is 404", async () => {
    const set = await startEngineReplicas(3, { decodeMs: 5, prefillMsPerKChar: 5 }, { models: [MODEL] });
    started.push(set);
    expect(new Set(set.replicas.map((r) => r.port)).size).toBe(3);
    const models = (await fetch(`${set.baseUrls[2]}/models`).then((x) => x.json())) as { data: { id: string }[] };
    expect(models.data.map((x) => x.id)).toEqual([MODEL]);
    for (const [i, url] of set.baseUrls.entries()) {
      const res = await post({ baseUrl: url }, body(null, `hello ${i}`));
      expect(res.headers.get("x-replica")).toBe(String(i));
      const j = (await res.json()) as { system_fingerprint: string; choices: { message: { content: string } }[] };
      expect(j.system_fingerprint).toBe(`replica-${i}`);
      expect(j.choices[0]!.message.content).toBe(`hello ${i}`);
    }
    const streamed = await post({ baseUrl: set.baseUrls[1]! }, body(null, "streamed", { stream: true, stream_options: { include_usage: true }, priority: 3 }));
    expect(streamed.headers.get("content-type")).toBe("text/event-stream");
    expect(streamed.headers.get("x-replica")).toBe("1");
    const events = (await streamed.text()).split("\n\n").filter(Boolean).map((e) => e.replace(/^data: /, ""));
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: { delta: { content?: string }; finish_reason: string | null }[]; usage?: unknown });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("streamed");
    expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop")).toBe(true);
    expect(chunks.at(-1)!.usage).toBeDefined();
    expect((await post({ baseUrl: set.baseUrls[0]! }, { ...body(null, "x"), model: "nope" })).status).toBe(404);
    expect(set.total()).toMatchObject({ index: -1, seen: 4, answered: 4, byPriority: { "0": 3, "3": 1 } });
    expect(set.stats().map((s) => s.answered)).toEqual([1, 2, 1]);
  });
});

describe("kill and restart", () => {
  test("kill drops open connections at once; restart listens on the same port with an empty cache", async () => {
    const r = await replica({ maxRunning: 1 });
    const warm = await post(r, body(sys("K", 300), "x"));
    expect(warm.headers.get("x-prefix-cache")).toBe("miss");
    expect(r.cacheKeys().length).toBe(1);
    r.pause();
    const streamed = post(r, body(null, "s", { stream: true }));
    const held = [streamed, post(r, body(null, "a")), post(r, body(null, "b"))].map((p) => p.then((x) => x.text()).then((t) => `answered ${t.length}`, (e: Error) => `failed: ${e.message}`));
    await waitFor(() => r.stats().inFlight === 3, "three held");
    // The streamed answer's headers are out before its work is done, as from a real engine.
    expect((await streamed).status).toBe(200);
    expect(await r.kill()).toBe(3);
    const outcomes = await Promise.all(held);
    expect(outcomes.every((o) => o.startsWith("failed"))).toBe(true);
    expect(r.up).toBe(false);
    expect(r.stats()).toMatchObject({ up: false, inFlight: 0, dropped: 3, kills: [3], answered: 1, seen: 4 });
    expect(r.cacheKeys()).toEqual([]);
    // Nothing listens: a refused connection.
    const refused = await fetch(`${r.baseUrl}/models`).then(
      () => "answered",
      () => "refused",
    );
    expect(refused).toBe("refused");
    await r.restart();
    expect(r.up).toBe(true);
    r.resume();
    expect((await fetch(`http://127.0.0.1:${r.port}/v1/models`)).status).toBe(200);
    const again = await post(r, body(sys("K", 300), "x"));
    expect([again.status, again.headers.get("x-replica"), again.headers.get("x-prefix-cache")]).toEqual([200, "0", "miss"]);
    expect(r.stats()).toMatchObject({ answered: 2, seen: 5, dropped: 3 });
  });
});

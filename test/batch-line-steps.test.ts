// The steps of a batch line's upstream request (src/batches/worker/lineSteps.ts),
// each on its own: wait at the gate → attempt → judge → back off (with a
// fake clock), then runUpstream putting them together against a loopback
// fake engine. Run in the test's thread: the Worker's modules work on any
// thread given a health memory (initGate) and, for limited models, slot cells.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { PricedModel, RunTask } from "../src/batches/types";
import { runUpstream } from "../src/batches/worker/execute";
import { Attempts, attempt, backOff, done, judge, lineCall, passGate, type Clock, type ShardControl, type Tried } from "../src/batches/worker/lineSteps";
import { cancelAsks, initSlots, onGrants, setSharedSlots, setSlotBatch } from "../src/batches/worker/slots";
import { initGate } from "../src/batches/worker/upstreamGate";
import { ANSWERED, ANSWERS, CELLS, IN_FLIGHT, LIMIT } from "../src/inference/admission/slotCells";
import { OwnAnswer } from "../src/inference/upstream/answer";
import { CallFailure, classify } from "../src/inference/upstream/fate";
import { DOWN, FAIL_THRESHOLD, SUSPECT, UP, markDown, markUp, newHealthMemory, pausedFor, report429, reportFailure, stateOf, windowOf, type HealthMemory } from "../src/inference/upstream/health";
import { UpstreamConnectionError } from "../src/inference/upstream/httpClient";
import type { FromWorker } from "../src/batches/types";
import { plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { eventually } from "./helpers/inference";
import { freePort } from "./helpers/env";

const U = 5;
let mem: HealthMemory;
let posted: FromWorker[];

beforeEach(() => {
  mem = newHealthMemory();
  posted = [];
  initGate(mem, (m) => posted.push(m));
});

const model = (over: Partial<PricedModel> = {}): PricedModel => ({
  id: "steps-model",
  kind: "upstream",
  baseUrl: "http://127.0.0.1:9/v1",
  apiKey: null,
  upstreamModel: null,
  timeoutMs: 5000,
  latencyMs: 0,
  tokensPerSecond: 0,
  upstreamIdx: U,
  upstream: "steps",
  batchPriority: null,
  ownClient: true,
  inputPerMillion: 0,
  outputPerMillion: 0,
  limited: false,
  sharedBase: -1,
  ...over,
});

const task = (over: Partial<RunTask> = {}): RunTask => ({
  type: "run",
  batchId: "batch_steps",
  idx: 0,
  input: { kind: "local", path: "/dev/null" } as unknown as RunTask["input"],
  start: 0,
  end: 0,
  endpoint: "/v1/chat/completions",
  outPath: "/dev/null",
  errPath: "/dev/null",
  partTargets: null,
  claim: 1,
  stopCode: null,
  deadline: Date.now() + 3_600_000,
  maxAttempts: 5,
  retryBaseMs: 100,
  concurrency: 8,
  ...over,
});

const control = (): ShardControl => ({ stopCode: null, pausing: false });
const req = (content = "hello") => ({ custom_id: `c-${content}`, body: { model: "steps-model", messages: [{ role: "user", content }] } });
/** Whether a promise has settled within `ms`. */
const settledWithin = (p: Promise<unknown>, ms: number) => Promise.race([p.then(() => true), Bun.sleep(ms).then(() => false)]);

describe("1. wait at the gate", () => {
  test("an upstream that is up: passes at once, holding a place in the window until done", async () => {
    const pass = await passGate(model(), control());
    expect(pass.stopped).toBe(false);
    expect(windowOf(mem, U).inFlight).toBe(1);
    if (!pass.stopped) done(pass);
    expect(windowOf(mem, U).inFlight).toBe(0);
  });

  test("a down upstream: the line waits until it is up again", async () => {
    markDown(mem, U);
    const p = passGate(model(), control());
    expect(await settledWithin(p, 80)).toBe(false);
    markUp(mem, U);
    expect(await settledWithin(p, 200)).toBe(true);
    expect((await p).stopped).toBe(false);
  });

  test("paused by a 429: the line waits out the retry-after", async () => {
    report429(mem, U, 150);
    const t0 = Date.now();
    const pass = await passGate(model(), control());
    expect(pass.stopped).toBe(false);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(120);
  });

  test("a full window: the line waits for a place", async () => {
    report429(mem, U, 0); // nothing in flight: the window shrinks to 1, no pause
    expect(windowOf(mem, U).window).toBe(1);
    const first = await passGate(model(), control());
    const second = passGate(model(), control());
    expect(await settledWithin(second, 80)).toBe(false);
    if (!first.stopped) done(first);
    expect(await settledWithin(second, 200)).toBe(true);
  });

  test("stopped while waiting: gives up, saying whether the upstream is down", async () => {
    markDown(mem, U);
    const c = control();
    const p = passGate(model(), c);
    setTimeout(() => (c.stopCode = "batch_cancelled"), 30);
    expect(await p).toEqual({ stopped: true, down: true });
    markUp(mem, U);
    report429(mem, U, 10_000);
    const paused = control();
    const q = passGate(model(), paused);
    setTimeout(() => (paused.pausing = true), 30);
    expect(await q).toEqual({ stopped: true, down: false });
  });

  test("a limited model: the pass holds a scheduler slot, given back with the attempt's outcome", async () => {
    const cells = new Int32Array(new SharedArrayBuffer(4 * CELLS));
    Atomics.store(cells, LIMIT, 1);
    setSharedSlots(cells, new Int32Array(new SharedArrayBuffer(4)), () => 0);
    try {
      const pass = await passGate(model({ limited: true }), control());
      expect(Atomics.load(cells, IN_FLIGHT)).toBe(1);
      if (!pass.stopped) done(pass, ANSWERED);
      expect(Atomics.load(cells, IN_FLIGHT)).toBe(0);
      expect(Atomics.load(cells, ANSWERS)).toBe(1);
    } finally {
      setSharedSlots(new Int32Array(0), new Int32Array(0), () => -1);
    }
  });
});

describe("2. attempt", () => {
  let up: FakeUpstream;
  beforeAll(async () => {
    up = await startFakeUpstream({ models: ["steps-model"] });
  });
  afterAll(() => up.stop());

  for (const ownClient of [true, false])
    test(`an answer, read whole (${ownClient ? "own client" : "fetch"})`, async () => {
      const tried = await attempt(lineCall(req("attempt"), model({ baseUrl: up.baseUrl, ownClient }), "/chat/completions"));
      expect(tried.res?.status).toBe(200);
      expect(tried.res ? JSON.parse(tried.text).choices[0].message.content : null).toContain("attempt");
    });

  test("the request sent: the body with the upstream's model name and stream:false", async () => {
    const seen: unknown[] = [];
    const srv = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: async (r) => (seen.push(await r.json()), Response.json({})) });
    try {
      await attempt(lineCall({ custom_id: "x", body: { model: "steps-model", stream: true, n: 1 } }, model({ baseUrl: `http://127.0.0.1:${srv.port}`, upstreamModel: "engine-name" }), "/p"));
      expect(seen).toEqual([{ model: "engine-name", stream: false, n: 1 }]);
    } finally {
      srv.stop(true);
    }
  });

  test("no answer within the model's timeout: a failure that says it timed out", async () => {
    up.hang = true;
    try {
      const tried = await attempt(lineCall(req("slow"), model({ baseUrl: up.baseUrl, timeoutMs: 60 }), "/chat/completions"));
      expect(tried.res).toBeNull();
      if (!tried.res) expect(classify(tried.failure)).toMatchObject({ kind: "engine_failure", cause: "timeout" });
    } finally {
      up.hang = false;
    }
  });

  test("nobody listening: a failure that says it was refused", async () => {
    const tried = await attempt(lineCall(req(), model({ baseUrl: `http://127.0.0.1:${freePort()}` }), "/chat/completions"));
    expect(tried.res).toBeNull();
    if (!tried.res) expect(classify(tried.failure)).toMatchObject({ kind: "engine_failure", cause: "refused" });
  });
});

describe("3. judge", () => {
  const call = lineCall(req(), model(), "/chat/completions");
  const answered = (status: number, text: string, headers: Record<string, string> = {}): Tried => ({ res: new OwnAnswer(status, Object.entries(headers), new TextEncoder().encode(text), null), text });
  const line = (v: ReturnType<typeof judge>) => (v.kind === "done" ? JSON.parse(v.result.line) : null);

  test("a 2xx with JSON: the answer, spliced as sent, with the upstream's request id; a success for the upstream", () => {
    reportFailure(mem, U);
    const v = judge(req(), answered(200, '{"id":"x","usage":{"total_tokens":3}}', { "x-request-id": "up-1" }), model(), call, 1);
    expect(v).toMatchObject({ kind: "done", result: { ok: true, usage: { total_tokens: 3 } }, outcome: ANSWERED });
    expect(line(v)).toMatchObject({ custom_id: "c-hello", response: { status_code: 200, request_id: "up-1", body: { id: "x" } }, error: null });
    expect(reportFailure(mem, U)).toBe(false); // the streak was reset: this is 1 of FAIL_THRESHOLD again
  });

  test("a pretty-printed answer is re-serialised onto one line; a missing request id is ours", () => {
    const v = judge(req(), answered(200, '{\n  "id": "y"\n}'), model(), call, 1);
    expect(v.kind === "done" && v.result.line.indexOf("\n")).toBe(v.kind === "done" ? v.result.line.length - 1 : -1);
    expect(line(v).response.request_id).toMatch(/^req_/);
  });

  test("a 2xx that is not JSON: an upstream_invalid_response error line, response null, not retried", () => {
    const v = judge(req(), answered(200, "<html>oops</html>"), model(), call, 1);
    expect(v).toMatchObject({ kind: "done", result: { ok: false } });
    expect(line(v)).toMatchObject({ response: null, error: { code: "upstream_invalid_response" } });
    expect(line(v).error.message).toContain("<html>oops");
  });

  test("a 4xx other than 408/409/429: the request's answer, final, in the error file", () => {
    const v = judge(req(), answered(400, '{"error":{"message":"bad"}}'), model(), call, 1);
    expect(v).toMatchObject({ kind: "done", result: { ok: false } });
    expect(line(v)).toMatchObject({ response: { status_code: 400, body: { error: { message: "bad" } } }, error: null });
  });

  for (const status of [408, 409, 500])
    test(`${status}: retried as this request's failure (counted), after at least its retry-after`, () => {
      const v = judge(req(), answered(status, "not json", { "retry-after": "2" }), model(), call, 1);
      expect(v).toMatchObject({ kind: "retry", whole: false, waitMs: 2000, last: { status, body: { error: { message: "not json", type: "upstream_error" } } } });
    });

  test("502/503/504: the engine failing as a whole; the failure that makes the upstream suspect tells the main thread", () => {
    for (let i = 1; i <= FAIL_THRESHOLD; i++) {
      const v = judge(req(), answered(i === 1 ? 502 : i === 2 ? 504 : 503, "{}"), model(), call, i);
      expect(v).toMatchObject({ kind: "retry", whole: true, waitMs: null });
    }
    expect(stateOf(mem, U)).toBe(SUSPECT);
    expect(posted).toEqual([{ type: "upstream_down", upstream: U, error: "answered HTTP 503 to POST /chat/completions" }]);
  });

  test("a call that threw: whole, with why in the line's error message", () => {
    const v = judge(req(), { res: null, failure: new CallFailure(new UpstreamConnectionError("Failed to connect", "ECONNREFUSED")) }, model(), call, 1);
    expect(v).toMatchObject({ kind: "retry", whole: true, last: { error: "upstream unreachable: Failed to connect" } });
    const t = judge(req(), { res: null, failure: new CallFailure(new Error("aborted"), true) }, model(), call, 2);
    expect(t).toMatchObject({ kind: "retry", whole: true, last: { error: "upstream timed out after 5000 ms" } });
  });

  test("429: back to the gate, which now holds the upstream's batch lines for its retry-after", () => {
    const v = judge(req(), answered(429, '{"error":{}}', { "retry-after": "3" }), model(), call, 1);
    expect(v).toMatchObject({ kind: "rate_limited", last: { status: 429 } });
    expect(pausedFor(mem, U)).toBeGreaterThan(2500);
  });
});

describe("4. back off", () => {
  /** A clock that sleeps at once, moving its time on, and draws the given random numbers. */
  const fakeClock = (random = 1) => {
    const c = { t: 1_000_000, slept: [] as number[] };
    const clock: Clock = { now: () => c.t, random: () => random, sleep: async (ms) => void (c.slept.push(ms), (c.t += ms)) };
    return { c, clock };
  };
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

  test("exponential with full jitter: uniform in [0, base·2^(n-1)] for the n-th counted failure", async () => {
    const attempts = new Attempts(mem, U);
    for (const [n, random, want] of [
      [1, 1, 100],
      [2, 1, 200],
      [3, 0.5, 200],
      [4, 1, 800],
    ] as const) {
      attempts.failed(false, 0);
      const { c, clock } = fakeClock(random);
      expect(await backOff({ whole: false, waitMs: null }, attempts, model(), task(), control(), clock)).toBe("again");
      expect(sum(c.slept)).toBe(want);
      expect(attempts.counted()).toBe(n);
    }
  });

  test("at least the retry-after, at most 60 s", async () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(false, 0);
    let { c, clock } = fakeClock(0);
    await backOff({ whole: false, waitMs: 700 }, attempts, model(), task(), control(), clock);
    expect(sum(c.slept)).toBe(700);
    ({ c, clock } = fakeClock(1));
    await backOff({ whole: false, waitMs: 600_000 }, attempts, model(), task({ deadline: Infinity }), control(), clock);
    expect(sum(c.slept)).toBe(60_000);
  });

  test("the attempts spent, or the deadline before the retry: give up without sleeping", async () => {
    const attempts = new Attempts(mem, U);
    for (let i = 0; i < 3; i++) attempts.failed(false, 0);
    const { c, clock } = fakeClock(1);
    expect(await backOff({ whole: false, waitMs: null }, attempts, model(), task({ maxAttempts: 3 }), control(), clock)).toBe("give_up");
    expect(await backOff({ whole: false, waitMs: null }, attempts, model(), task({ deadline: c.t + 300 }), control(), clock)).toBe("give_up");
    // The engine failing as a whole (not yet called down) when the deadline comes: the line ends batch_expired, not with that failure.
    expect(await backOff({ whole: true, waitMs: null }, new Attempts(null, 0), model(), task({ deadline: c.t + 1 }), control(), clock)).toBe("expire");
    expect(c.slept).toEqual([]);
  });

  test("a stop gives up (the last failure is the result); a pause leaves the line undone", async () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(false, 0);
    const { clock } = fakeClock(1);
    expect(await backOff({ whole: false, waitMs: null }, attempts, model(), task(), { stopCode: "batch_expired", pausing: false }, clock)).toBe("give_up");
    expect(await backOff({ whole: false, waitMs: null }, attempts, model(), task(), { stopCode: null, pausing: true }, clock)).toBe("pause");
    // ...also when it comes during the wait, which it cuts short.
    const c2 = control();
    const slow: Clock = { now: Date.now, random: () => 1, sleep: (ms) => Bun.sleep(ms) };
    setTimeout(() => (c2.pausing = true), 30);
    const t0 = Date.now();
    expect(await backOff({ whole: false, waitMs: 10_000 }, attempts, model(), task(), c2, slow)).toBe("pause");
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  test("an outage that begins during the wait ends it: the line goes to the gate", async () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(false, 0);
    const slow: Clock = { now: Date.now, random: () => 1, sleep: (ms) => Bun.sleep(ms) };
    setTimeout(() => markDown(mem, U), 30);
    const t0 = Date.now();
    expect(await backOff({ whole: false, waitMs: 10_000 }, attempts, model(), task(), control(), slow)).toBe("again");
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  test("the engine failed as a whole and is down now: straight to the gate, the spent attempts notwithstanding", async () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(false, attempts.epoch()); // a 500: spends the one attempt
    attempts.failed(true, attempts.epoch());
    markDown(mem, U);
    const { c, clock } = fakeClock(1);
    expect(await backOff({ whole: true, waitMs: null }, attempts, model(), task({ maxAttempts: 1 }), control(), clock)).toBe("again");
    expect(c.slept).toEqual([]);
  });

  test("suspect: waits for the probe's verdict before counting", async () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(true, attempts.epoch());
    for (let i = 0; i < FAIL_THRESHOLD; i++) reportFailure(mem, U);
    expect(stateOf(mem, U)).toBe(SUSPECT);
    const { clock } = fakeClock(1);
    const p = backOff({ whole: true, waitMs: null }, attempts, model(), task(), control(), clock);
    expect(await settledWithin(p, 80)).toBe(false);
    markUp(mem, U); // the probe answered: the failures were these requests' own
    expect(await p).toBe("again");
    expect(attempts.counted()).toBe(1);
  });

  test("Attempts: failures as a whole from before the upstream went down are forgiven; the request's own never are", () => {
    const attempts = new Attempts(mem, U);
    attempts.failed(true, attempts.epoch());
    attempts.failed(true, attempts.epoch());
    attempts.failed(false, attempts.epoch());
    expect(attempts.counted()).toBe(3);
    markDown(mem, U);
    expect(attempts.counted()).toBe(1);
    markUp(mem, U);
    attempts.failed(true, attempts.epoch()); // in the new epoch: counts
    expect(attempts.counted()).toBe(2);
    expect(new Attempts(null, U).epoch()).toBe(0); // no health memory: everything counts
  });
});

describe("runUpstream: the steps together", () => {
  let up: FakeUpstream;
  beforeAll(async () => {
    up = await startFakeUpstream({ models: ["steps-model"] });
  });
  afterAll(() => up.stop());
  beforeEach(() => {
    up.plan = null;
    up.reset();
  });

  for (const ownClient of [true, false])
    test(`retried until answered: two 500s then the answer (${ownClient ? "own client" : "fetch"})`, async () => {
      up.plan = plans.failFirst(2, { status: 500 });
      const r = await runUpstream(req("retry-me"), model({ baseUrl: up.baseUrl, ownClient }), task({ retryBaseMs: 1 }), control());
      expect(r?.ok).toBe(true);
      expect(up.counts.get("retry-me")).toBe(3);
    });

  test("a poison line fails after max_attempts with the upstream's last answer", async () => {
    up.plan = plans.always({ status: 500 }, (c) => c === "poison");
    const r = await runUpstream(req("poison"), model({ baseUrl: up.baseUrl }), task({ retryBaseMs: 1, maxAttempts: 3 }), control());
    expect(r?.ok).toBe(false);
    expect(JSON.parse(r!.line).response.status_code).toBe(500);
    expect(up.counts.get("poison")).toBe(3);
  });

  test("an outage is not the line's failure: attempts that failed as a whole before the upstream went down are forgiven", async () => {
    up.plan = plans.failFirst(FAIL_THRESHOLD, { status: 503 });
    // The main thread's part: the probe of a suspect upstream fails (down), then it answers again (up).
    initGate(mem, (m) => {
      posted.push(m);
      if (m.type !== "upstream_down") return;
      markDown(mem, U);
      setTimeout(() => markUp(mem, U), 50);
    });
    const r = await runUpstream(req("outage"), model({ baseUrl: up.baseUrl }), task({ retryBaseMs: 1, maxAttempts: FAIL_THRESHOLD }), control());
    expect(r?.ok).toBe(true);
    expect(up.counts.get("outage")).toBe(FAIL_THRESHOLD + 1);
    expect(stateOf(mem, U)).toBe(UP);
    expect(posted.map((m) => m.type)).toEqual(["upstream_down"]);
  });

  test("stopped during the wait for a scheduler slot: a line not sent yet is not sent at all", async () => {
    // No free slot in shared memory: the line asks the main thread's scheduler and waits for a grant.
    const cells = new Int32Array(new SharedArrayBuffer(4 * CELLS));
    setSharedSlots(cells, new Int32Array(new SharedArrayBuffer(4)), () => 0);
    const asks: number[] = [];
    initSlots((m) => void (m.type === "slots" && asks.push(...m.acquire.map(([id]) => id))));
    try {
      const c = control();
      const r = runUpstream(req("late"), model({ baseUrl: up.baseUrl, limited: true }), task(), c);
      await Bun.sleep(30);
      expect(asks).toHaveLength(1);
      c.stopCode = "batch_expired";
      onGrants(asks);
      expect(JSON.parse((await r)!.line).error.code).toBe("batch_expired");
      expect(up.counts.get("late")).toBeUndefined();
    } finally {
      setSharedSlots(new Int32Array(0), new Int32Array(0), () => -1);
      initSlots(() => {});
    }
  });

  test("a pause withdraws the lines waiting for a slot: they end undone at once, the asks are cancelled there, and a grant that crossed the cancel goes straight back", async () => {
    const cells = new Int32Array(new SharedArrayBuffer(4 * CELLS));
    setSharedSlots(cells, new Int32Array(new SharedArrayBuffer(4)), () => 0);
    const sent: Extract<FromWorker, { type: "slots" }>[] = [];
    initSlots((m) => void (m.type === "slots" && sent.push(m)));
    try {
      const c = control();
      const m = model({ baseUrl: up.baseUrl, limited: true });
      const lines = [runUpstream(req("wait-1"), m, task(), c), runUpstream(req("wait-2"), m, task(), c)];
      const askedNow = () => sent.flatMap((x) => x.acquire.map(([id]) => id));
      await eventually(() => askedNow().length === 2, "two asks");
      const asked = askedNow();
      expect(asked).toHaveLength(2);
      // The pause: without the cancel these two would wait for grants that never come.
      c.pausing = true;
      cancelAsks();
      const ended = await Promise.race([Promise.all(lines), Bun.sleep(5000).then(() => "still waiting")]);
      expect(ended).toEqual([null, null]);
      expect(up.counts.get("wait-1")).toBeUndefined();
      await eventually(() => sent.flatMap((x) => x.cancel).length === 2, "the cancel sent");
      expect(sent.flatMap((x) => x.cancel).sort()).toEqual([...asked].sort());
      // The main thread had granted the first before it read the cancel, and the grant came after
      // this Worker's next shard began: the slot is given back, unused.
      setSlotBatch("the-next-shard");
      onGrants([asked[0]!]);
      await eventually(() => sent.some((x) => x.release.includes(asked[0]!)), "the crossed grant given back");
      // (Only these two: a release left from the test before may come in the same messages.)
      const released = sent.flatMap((x) => x.release).filter((id) => asked.includes(id));
      expect(released).toEqual([asked[0]!]);
      // A line that comes to the gate after the pause asks for nothing.
      const late = await runUpstream(req("wait-3"), m, task(), c);
      expect(late).toBeNull();
      expect(sent.flatMap((x) => x.acquire)).toHaveLength(2);
    } finally {
      setSharedSlots(new Int32Array(0), new Int32Array(0), () => -1);
      initSlots(() => {});
    }
  });

  test("429s never count against max_attempts: the line waits at the gate and goes again", async () => {
    up.plan = plans.failFirst(2, { status: 429, retryAfter: 0 });
    const r = await runUpstream(req("slow-down"), model({ baseUrl: up.baseUrl }), task({ retryBaseMs: 1, maxAttempts: 1 }), control());
    expect(r?.ok).toBe(true);
    expect(up.counts.get("slow-down")).toBe(3);
  });

  test("stopped while the upstream is down after failing: the batch's stop code, not the outage's 503", async () => {
    up.plan = plans.always({ status: 503 }, (c) => c === "cut-off");
    initGate(mem, (m) => m.type === "upstream_down" && markDown(mem, U));
    const c = control();
    const r = runUpstream(req("cut-off"), model({ baseUrl: up.baseUrl }), task({ retryBaseMs: 1 }), c);
    await pollUntilDown();
    c.stopCode = "batch_cancelled";
    expect(JSON.parse((await r)!.line).error.code).toBe("batch_cancelled");
    expect(up.counts.get("cut-off")).toBe(FAIL_THRESHOLD);
  });

  const pollUntilDown = async () => {
    for (let i = 0; i < 200 && stateOf(mem, U) !== DOWN; i++) await Bun.sleep(10);
    expect(stateOf(mem, U)).toBe(DOWN);
  };

  test("stopped while the upstream is down: the batch's stop code, not a failure", async () => {
    markDown(mem, U);
    const c = control();
    setTimeout(() => (c.stopCode = "batch_cancelled"), 30);
    const r = await runUpstream(req("never"), model({ baseUrl: up.baseUrl }), task(), c);
    expect(JSON.parse(r!.line).error.code).toBe("batch_cancelled");
    expect(up.counts.get("never")).toBeUndefined();
    expect(stateOf(mem, U)).toBe(DOWN);
  });
});

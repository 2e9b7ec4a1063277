// Adaptive concurrency (docs/CONTRACT.md §18, max_concurrency "auto"): the controller
// (src/inference/admission/adaptive.ts) against a simulated engine, window by window;
// the scheduler that feeds it and applies its limit (interactive first
// within it, a cluster share as its ceiling, releases that count what they
// saw); the config; and a batch on a real server against the engine model
// (test/helpers/engineModel.ts) converging inside the engine's peak region.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AdaptiveLimit } from "../src/inference/admission/adaptive";
import { Scheduler, type Release } from "../src/inference/admission/scheduler";
import { ANSWERED, ANSWERS, CELLS, HELD, LIMIT, OVERLOADED, OVERLOADS, UNMEASURED, slotOutcome } from "../src/inference/admission/slotCells";
import type { ModelEntry } from "../src/inference/registry";
import { ModelRegistry } from "../src/inference/registry";
import { UpstreamMonitor } from "../src/inference/upstream/monitor";
import { ConfigError, resolveConfig } from "../src/config";
import { createLogger } from "../src/log";
import { acquireSlot, setSharedSlots } from "../src/batches/worker/slots";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { latencyAt, startEngineModel, throughputAt, type EngineModel, type EngineShape } from "./helpers/engineModel";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { parseMetrics } from "./helpers/outage";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS, waitFor } from "./helpers/wait";

/** A deterministic source of noise in [-1, 1]. */
function noiseSource(seed = 7): () => number {
  let s = seed;
  return () => {
    s = (s * 16807) % 2147483647;
    return (s / 2147483647) * 2 - 1;
  };
}

interface SimWindow {
  t: number;
  limit: number;
  throughput: number;
}

/**
 * Feeds the controller the windows a steady engine would give: with L in
 * flight (or `demand`, if less), latency latencyAt(L), L/latency answers a
 * second, 503s past failAt. Windows last 200 ms or a latency, and hold at
 * least 32 answers or last 2 latencies, as the scheduler's do. `cv`: how much single requests'
 * latencies differ (their coefficient of variation; 0.5 is a mix of short
 * and long answers): a window's mean is off by about cv/√answers. A change
 * of limit costs one latency of settling, as in the scheduler. The engine
 * (`shapeAt`) may change over time.
 */
function simulate(ctl: AdaptiveLimit, shapeAt: (t: number) => EngineShape, ms: number, opts: { cv?: number; demand?: number; from?: number } = {}): SimWindow[] {
  const noise = noiseSource();
  const out: SimWindow[] = [];
  let t = opts.from ?? 0;
  const end = t + ms;
  while (t < end) {
    const shape = shapeAt(t);
    const limit = ctl.limit;
    const n = Math.min(limit, opts.demand ?? Infinity);
    const served = Math.min(n, shape.failAt - 1);
    const mean = latencyAt(shape, served);
    const answers = Math.max(Math.min(32, 2 * served), (served / mean) * Math.max(200, mean));
    const dur = (answers * mean) / served;
    // About normal: the sum of three uniforms has a standard deviation of 1.
    const latency = mean * (1 + ((opts.cv ?? 0) * (noise() + noise() + noise())) / Math.sqrt(answers));
    const next = ctl.update({ at: t + dur, completions: answers, latencyMs: latency, overloads: Math.max(0, n - served), binding: n >= limit });
    out.push({ t, limit, throughput: (served * 1000) / mean });
    t += dur;
    if (next !== limit) {
      out.push({ t, limit: next, throughput: (Math.min(next, served) * 1000) / mean });
      t += Math.min(mean, 30_000);
    }
  }
  return out;
}

const peakOf = (shape: EngineShape) => {
  let best = 0;
  for (let n = 1; n <= shape.failAt; n++) best = Math.max(best, throughputAt(shape, n));
  return best;
};

/** Throughput over the run (each window weighted by its length: windows are spaced by time). */
function meanThroughput(w: SimWindow[]): number {
  let sum = 0;
  let time = 0;
  for (let i = 0; i + 1 < w.length; i++) {
    const dt = w[i + 1]!.t - w[i]!.t;
    sum += w[i]!.throughput * dt;
    time += dt;
  }
  return sum / time;
}

const share = (w: SimWindow[], ok: (x: SimWindow) => boolean) => w.filter(ok).length / w.length;

const ENGINE: EngineShape = { unloadedMs: 100, knee: 24, cliff: 48, failAt: 96 };

describe("the engine model", () => {
  test("latency grows with the requests in flight: flat throughput from the knee, less past the cliff, 503 from failAt", async () => {
    const shape: EngineShape = { unloadedMs: 40, knee: 4, cliff: 8, failAt: 16 };
    const e = await startEngineModel(shape);
    try {
      const call = async () => {
        const t0 = performance.now();
        const res = await fetch(`${e.baseUrl}/chat/completions`, { method: "POST", body: JSON.stringify({ model: "engine-chat", messages: [{ role: "user", content: "hi" }] }) });
        const body = (await res.json()) as { choices?: { message: { content: string } }[] };
        return { status: res.status, ms: performance.now() - t0, content: body.choices?.[0]?.message.content };
      };
      const together = async (n: number) => Promise.all(Array.from({ length: n }, call));
      const alone = await call();
      expect(alone).toMatchObject({ status: 200, content: "hi" });
      expect(alone.ms).toBeGreaterThanOrEqual(39);
      const atCliff = await together(8);
      const past = await together(12);
      const over = await together(20);
      const mean = (xs: { ms: number }[]) => xs.reduce((a, x) => a + x.ms, 0) / xs.length;
      // At least what the model says (a busy machine only adds): 8 at once
      // take twice what 4 do (flat throughput), 12 past the cliff 1.5 × 12/8
      // of that (throughput falls).
      expect(latencyAt(shape, 8) / latencyAt(shape, 4)).toBeCloseTo(2, 5);
      expect(latencyAt(shape, 12) / latencyAt(shape, 8)).toBeCloseTo(1.5 * 1.5, 5);
      expect(mean(atCliff)).toBeGreaterThan(0.95 * latencyAt(shape, 8));
      expect(mean(past)).toBeGreaterThan(0.95 * latencyAt(shape, 12));
      expect(over.filter((r) => r.status === 503).length).toBe(4);
      const s = e.stats();
      expect(s).toMatchObject({ rejected: 4, maxInFlight: 16 });
      expect(s.pastCliffMs).toBeGreaterThan(0);
      expect((await (await fetch(`${e.baseUrl}/models`)).json()) as unknown).toMatchObject({ data: [{ id: "engine-chat" }] });
    } finally {
      await e.stop();
    }
  });
});

describe("the controller against a simulated engine", () => {
  test("rises from its start to the knee and stays in the peak region, near the floor", () => {
    const shapes: EngineShape[] = [
      ENGINE,
      { unloadedMs: 50, knee: 100, cliff: 180, failAt: 400 },
      { unloadedMs: 30, knee: 4, cliff: 8, failAt: 16 },
      // A slow engine: the windows and the probe interval stretch with its latency.
      { unloadedMs: 2000, knee: 32, cliff: 64, failAt: 128 },
    ];
    for (const shape of shapes) {
      const ctl = new AdaptiveLimit({ max: 256 });
      const run = simulate(ctl, () => shape, 150 * shape.unloadedMs + 40_000);
      const settled = run.filter((w) => w.t > 40 * shape.unloadedMs + 8_000);
      // An interactive request within the limit: the engine's latency there, and a wait for the next slot to come free.
      const seen = settled.map((w) => (latencyAt(shape, w.limit) * (1 + 1 / (2 * w.limit))) / shape.unloadedMs).sort((a, b) => a - b);
      expect({
        knee: shape.knee,
        throughput: meanThroughput(run) / peakOf(shape) >= 0.9,
        inPeakRegion: share(settled, (w) => w.limit >= 0.8 * shape.knee && w.limit < shape.cliff) >= 0.9,
        interactive: seen[seen.length >> 1]! <= 1.5,
      }).toEqual({ knee: shape.knee, throughput: true, inPeakRegion: true, interactive: true });
    }
  });

  test("requests of different sizes (noisy windows): still near the peak", () => {
    for (const cv of [0.3, 0.5]) {
      const ctl = new AdaptiveLimit({ max: 256 });
      const run = simulate(ctl, () => ENGINE, 60_000, { cv });
      const settled = run.filter((w) => w.t > 12_000);
      expect({ cv, throughput: meanThroughput(run) / peakOf(ENGINE) >= 0.85, inPeakRegion: share(settled, (w) => w.limit >= 0.7 * ENGINE.knee && w.limit < ENGINE.cliff) >= 0.85 }).toEqual({
        cv,
        throughput: true,
        inPeakRegion: true,
      });
    }
  });

  test("backs off from past the cliff", () => {
    // No 503s: only the latency says it is too many.
    const shape = { ...ENGINE, failAt: 10_000 };
    // Started past it (the old default of 64 on this engine)…
    const ctl = new AdaptiveLimit({ max: 256, initial: 64 });
    const run = simulate(ctl, () => shape, 60_000);
    const later = run.filter((w) => w.t > 15_000);
    expect(run[0]!.limit).toBe(64);
    expect(share(later, (w) => w.limit < shape.cliff)).toBeGreaterThanOrEqual(0.95);
    expect(share(later, (w) => w.limit >= 0.8 * shape.knee)).toBeGreaterThanOrEqual(0.9);

    // …or once there, when the engine's capacity falls (another tenant on its GPU): knee 24 → 8.
    const small = { ...shape, knee: 8, cliff: 16 };
    const ctl2 = new AdaptiveLimit({ max: 256 });
    const run2 = simulate(ctl2, (t) => (t < 20_000 ? shape : small), 60_000);
    expect(share(run2.filter((w) => w.t > 10_000 && w.t < 20_000), (w) => w.limit >= 0.8 * shape.knee)).toBeGreaterThanOrEqual(0.9);
    expect(share(run2.filter((w) => w.t > 30_000), (w) => w.limit < small.cliff && w.limit >= 0.8 * small.knee)).toBeGreaterThanOrEqual(0.9);
  });

  test("cuts at once on 429/503, and stays under where they begin", () => {
    const ctl = new AdaptiveLimit({ max: 256, initial: 40 });
    ctl.update({ at: 1000, completions: 100, latencyMs: 100, overloads: 0, binding: true });
    const before = ctl.limit;
    expect(ctl.update({ at: 1300, completions: 90, latencyMs: 100, overloads: 3, binding: true })).toBe(Math.round(before * 0.7));
    expect(ctl.last).toBe("overload");

    // A hosted API that answers 429 from 20 at once, while its latency stays flat.
    const shape: EngineShape = { unloadedMs: 100, knee: 200, cliff: 400, failAt: 20, slope: 0 };
    const run = simulate(new AdaptiveLimit({ max: 256 }), () => shape, 120_000).filter((w) => w.t > 10_000);
    const mean = run.reduce((a, w) => a + w.limit, 0) / run.length;
    expect(share(run, (w) => w.limit >= shape.failAt)).toBeLessThanOrEqual(0.2);
    expect(mean).toBeGreaterThanOrEqual(12);
  });

  test("stays within its ceiling, and follows a lower one at once", () => {
    const ctl = new AdaptiveLimit({ max: 16 });
    const run = simulate(ctl, () => ENGINE, 20_000);
    expect(Math.max(...run.map((w) => w.limit))).toBe(16);
    ctl.setMax(10);
    expect(ctl.limit).toBe(10);
    expect(ctl.ceiling).toBe(10);
    const after = simulate(ctl, () => ENGINE, 20_000, { from: 20_000 });
    expect(Math.max(...after.map((w) => w.limit))).toBeLessThanOrEqual(10);
  });

  test("does not grow while the limit is not what holds requests back", () => {
    const ctl = new AdaptiveLimit({ max: 256 });
    // A batch with few lines left: 5 in flight, the limit 8 never reached.
    const run = simulate(ctl, () => ENGINE, 30_000, { demand: 5 });
    expect(Math.max(...run.map((w) => w.limit))).toBe(8);
  });

  test("longer requests (a slower floor) are learnt from its probes, not taken for overload for long", () => {
    const light = ENGINE;
    const heavy = { ...ENGINE, unloadedMs: 300 };
    const ctl = new AdaptiveLimit({ max: 256 });
    const run = simulate(ctl, (t) => (t < 20_000 ? light : heavy), 60_000);
    const late = run.filter((w) => w.t > 40_000);
    expect(share(late, (w) => w.limit >= 0.8 * heavy.knee && w.limit < heavy.cliff)).toBeGreaterThanOrEqual(0.9);
  });
});

/** A model entry as the registry makes it, for the scheduler alone. */
function model(id: string, adaptive: boolean, maxConcurrency: number | null): ModelEntry {
  return { id, adaptive, maxConcurrency, queueSize: 64 } as ModelEntry;
}

describe("the scheduler's side", () => {
  let s: Scheduler;
  beforeAll(() => {
    s = new Scheduler();
  });
  afterAll(() => s.stop());

  /** Answers as Workers would count them in the shared cells: n answers of `ms` each. */
  function answer(m: ModelEntry, n: number, ms: number): void {
    const base = s.sharedBase(m);
    Atomics.add(s.sharedCells, base + ANSWERS, n);
    Atomics.add(s.sharedCells, base + HELD, n * ms * 10);
  }

  test("interactive requests keep their priority within the limit the controller finds", async () => {
    const m = model("auto-a", true, 256);
    expect(s.limitOf(m)).toBe(8);
    const batch: Release[] = [];
    for (let i = 0; i < 8; i++) batch.push(await s.acquireBatch(m));
    const order: string[] = [];
    const waiting = [
      ...Array.from({ length: 4 }, (_, i) => s.acquireBatch(m).then(() => order.push(`batch ${i}`))),
      ...Array.from({ length: 2 }, (_, i) => s.acquireInteractive(m).then(() => order.push(`interactive ${i}`))),
    ];
    // Windows of answers near the floor while requests wait: the limit grows (8 → 12).
    const t0 = performance.now() + 1000;
    answer(m, 40, 100);
    s.tickAdaptive(t0);
    await Bun.sleep(0);
    expect(s.limitOf(m)).toBe(12);
    // The Workers see the new limit in the shared cells.
    expect(Atomics.load(s.sharedCells, s.sharedBase(m) + LIMIT)).toBe(12);
    expect(order).toEqual(["interactive 0", "interactive 1", "batch 0", "batch 1"]);
    for (const r of batch) r();
    await Promise.all(waiting);
    expect(order.slice(4)).toEqual(["batch 2", "batch 3"]);
  });

  test("a window in which this process was held (a late tick) is not the engine's: not counted", async () => {
    const m = model("auto-d", true, 256);
    const held: Release[] = [];
    for (let i = 0; i < 8; i++) held.push(await s.acquireBatch(m));
    const more = s.acquireBatch(m);
    const t0 = performance.now() + 1000;
    answer(m, 40, 100);
    s.tickAdaptive(t0, 60);
    expect([s.limitOf(m), s.adaptiveState(m.id)!.latencyMs]).toEqual([8, null]);
    // A tick late by less than a tenth of the latency (or 10 ms) is no pause.
    answer(m, 40, 100);
    s.tickAdaptive(t0 + 500, 8);
    expect([s.limitOf(m), s.adaptiveState(m.id)!.latencyMs]).toEqual([12, 100]);
    for (const r of held) r();
    (await more)();
  });

  test("a hold short beside the latency (60 ms in a window of 1 s answers, as under a container's CPU quota) leaves the window counted, from the first one on", async () => {
    const m = model("auto-q", true, 256);
    const held: Release[] = [];
    for (let i = 0; i < 8; i++) held.push(await s.acquireBatch(m));
    const more = s.acquireBatch(m);
    const t0 = performance.now() + 1000;
    // No latency known yet: the window's own (1 s) is what a hold is judged against.
    answer(m, 40, 1000);
    s.tickAdaptive(t0 + 1000, 60);
    expect([s.limitOf(m), s.adaptiveState(m.id)!.latencyMs]).toEqual([12, 1000]);
    for (const r of held) r();
    (await more)();
  });

  test("on a cluster, this node's share of max_concurrency_limit is the controller's ceiling", async () => {
    const m = model("auto-b", true, 256);
    s.setLimit(m, 5);
    expect(s.limitOf(m)).toBe(5);
    expect(s.adaptiveState(m.id)!.ceiling).toBe(5);
    const held: Release[] = [];
    for (let i = 0; i < 5; i++) held.push(await s.acquireBatch(m));
    const more = s.acquireBatch(m);
    let t = performance.now() + 1000;
    for (let i = 0; i < 20; i++) {
      answer(m, 40, 100);
      s.tickAdaptive((t += 500));
    }
    expect(s.limitOf(m)).toBe(5);
    for (const r of held) r();
    (await more)();
    // More nodes than max_concurrency_limit: a node's part may be 0, and then it has none.
    s.setLimit(m, 0);
    expect(s.limitOf(m)).toBe(0);
    // A part again: it starts over from one slot (and grows while requests wait).
    s.setLimit(m, 3);
    expect(s.limitOf(m)).toBe(1);
  });

  test("a release counts what its holder saw: a 2xx and its time, a 429/503, or nothing", async () => {
    const m = model("auto-c", true, 256);
    const base = s.sharedBase(m);
    const cell = (i: number) => Atomics.load(s.sharedCells, base + i);
    const r1 = await s.acquireInteractive(m);
    await Bun.sleep(20);
    r1(ANSWERED);
    expect([cell(ANSWERS), cell(OVERLOADS)]).toEqual([1, 0]);
    expect(cell(HELD)).toBeGreaterThanOrEqual(150); // ≥ 15 ms, in tenths
    (await s.acquireInteractive(m))(OVERLOADED);
    (await s.acquireInteractive(m))();
    expect([cell(ANSWERS), cell(OVERLOADS)]).toEqual([1, 1]);

    // A Worker's slots (batches/worker/slots.ts) count into the same cells.
    const heldByWorker = new Int32Array(new SharedArrayBuffer(4 * 1024));
    setSharedSlots(s.sharedCells, heldByWorker, (id) => (id === m.id ? base : -1));
    const w1 = await acquireSlot(m.id);
    await Bun.sleep(10);
    w1!(ANSWERED);
    (await acquireSlot(m.id))!(OVERLOADED);
    expect([cell(ANSWERS), cell(OVERLOADS)]).toEqual([2, 2]);
    expect(cell(HELD)).toBeGreaterThanOrEqual(150 + 80);
    expect(base % CELLS).toBe(0);
    // What an upstream's status counts as.
    expect([200, 201, 429, 503, 500, 502, 400].map(slotOutcome)).toEqual([ANSWERED, ANSWERED, OVERLOADED, OVERLOADED, UNMEASURED, UNMEASURED, UNMEASURED]);
  });
});

describe("config", () => {
  const dir = mkdtempSync(join(tmpdir(), "offpeak-adaptive-config-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const registryOf = (file: unknown) => {
    writeFileSync(join(dir, "c.json"), JSON.stringify(file));
    const config = resolveConfig(["--config", join(dir, "c.json"), "--data-dir", dir], {});
    const log = createLogger("error", () => {});
    return new ModelRegistry(config, log, new UpstreamMonitor(config.upstreams, log));
  };

  test('"auto" is the default for upstream models, within max_concurrency_limit (256 unless set); a number is fixed; built-ins stay unlimited', () => {
    const r = registryOf({
      upstreams: [
        { name: "a", base_url: "http://127.0.0.1:1/v1", models: ["a-default"] },
        { name: "b", base_url: "http://127.0.0.1:1/v1", models: ["b-auto", "b-fixed"], max_concurrency: "auto", max_concurrency_limit: 32 },
      ],
      models: { "b-fixed": { max_concurrency: 12 }, "offpeak-echo": { max_concurrency: "auto" } },
    });
    const view = (id: string) => ({ adaptive: r.get(id)!.adaptive, max: r.get(id)!.maxConcurrency });
    expect(view("a-default")).toEqual({ adaptive: true, max: 256 });
    expect(view("b-auto")).toEqual({ adaptive: true, max: 32 });
    expect(view("b-fixed")).toEqual({ adaptive: false, max: 12 });
    expect(view("offpeak-echo")).toEqual({ adaptive: false, max: null });
    expect(view("offpeak-embed")).toEqual({ adaptive: false, max: null });
  });

  test("anything else is refused at start", () => {
    expect(() => registryOf({ upstreams: [{ name: "a", base_url: "http://x/v1", max_concurrency: "fast" }] })).toThrow(ConfigError);
    expect(() => registryOf({ upstreams: [{ name: "a", base_url: "http://x/v1", max_concurrency_limit: 0 }] })).toThrow(ConfigError);
  });
});

describe("on a real server", () => {
  // A fast engine: 20 ms alone, throughput flat from 16 to 32 in flight, 503 from 64.
  const shape: EngineShape = { unloadedMs: 20, knee: 16, cliff: 32, failAt: 64 };
  let engine: EngineModel;
  /** Answers "busy" with 503 and "slow down" with 429. */
  let busy: FakeUpstream;
  let t: TestServer;
  const dir = mkdtempSync(join(tmpdir(), "offpeak-adaptive-"));
  beforeAll(async () => {
    engine = await startEngineModel(shape, { models: ["engine-chat"] });
    busy = await startFakeUpstream({ models: ["busy-chat"], latencyMs: 5, plan: (r) => (r.content === "busy" ? { status: 503 } : r.content === "slow down" ? { status: 429 } : null) });
    // No max_concurrency: "auto" by default.
    writeFileSync(
      join(dir, "c.json"),
      JSON.stringify({
        upstreams: [
          { name: "engine", base_url: engine.baseUrl, models: ["engine-chat"] },
          { name: "busy", base_url: busy.baseUrl, models: ["busy-chat"] },
        ],
      }),
    );
    t = await startTestServer({ argv: ["--config", join(dir, "c.json")], env: { OFFPEAK_BATCH_WORKERS: "2" } });
  });
  afterAll(async () => {
    await t?.stop();
    await engine?.stop();
    await busy?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("interactive requests count too: a 2xx with its time, a 429 or 503 as overload", async () => {
    const s = t.server.ctx.scheduler;
    const model = t.server.ctx.registry.get("busy-chat")!;
    const base = s.sharedBase(model);
    const cell = (i: number) => Atomics.load(s.sharedCells, base + i);
    const chat = (content: string) => t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "busy-chat", messages: [{ role: "user", content }] }) });
    const before = [cell(ANSWERS), cell(HELD), cell(OVERLOADS)];
    expect((await chat("fine")).status).toBe(200);
    expect([cell(ANSWERS) - before[0]!, cell(OVERLOADS) - before[2]!]).toEqual([1, 0]);
    expect(cell(HELD) - before[1]!).toBeGreaterThanOrEqual(40); // ≥ 4 ms, in tenths
    expect((await chat("busy")).status).toBe(502);
    expect((await chat("slow down")).status).toBe(429);
    expect([cell(ANSWERS) - before[0]!, cell(OVERLOADS) - before[2]!]).toEqual([1, 2]);
  });

  test("a batch against the engine model converges to a limit inside its peak region, seldom past its cliff, and /metrics shows it", async () => {
    const client = t.sdk();
    const N = 4000;
    const lines = Array.from({ length: N }, (_, i) => chatReq(`e-${i}`, `line ${i}`, { model: "engine-chat" }));
    const { batch } = await createBatch(client, lines);
    engine.reset();
    const limits: { at: number; limit: number }[] = [];
    const t0 = performance.now();
    const sampler = setInterval(() => limits.push({ at: performance.now() - t0, limit: t.server.ctx.scheduler.adaptiveState("engine-chat")?.limit ?? 0 }), 50);
    let metrics: Map<string, number> | null = null;
    // Once it has measured a latency (a condition, not a time: a busy machine's first windows may not
    // count), /metrics shows it.
    const reading = waitFor(() => (t.server.ctx.scheduler.adaptiveState("engine-chat")?.latencyMs ?? null) !== null, "the controller to measure a latency", 30_000).then(
      async () => (metrics = parseMetrics(await (await t.api("/metrics")).text())),
    );
    const done = await waitBatch(client, batch.id, undefined, 30_000);
    clearInterval(sampler);
    await reading;
    const e = engine.stats();
    const state = t.server.ctx.scheduler.adaptiveState("engine-chat")!;
    const later = limits.filter((x) => x.at > 2000).map((x) => x.limit).sort((a, b) => a - b);
    const median = later[later.length >> 1]!;
    const trace = state.trace.map((p) => `${(p.at / 1000).toFixed(2)}:${p.limit}:${p.decision}`).join(" ");
    expect({ status: done.status, completed: done.request_counts?.completed }).toEqual({ status: "completed", completed: N });
    // A generous band around the peak region (this machine's own overhead per request moves the knee a little).
    expect({ median, inBand: median >= 0.6 * shape.knee && median <= shape.cliff, trace }).toMatchObject({ inBand: true });
    expect(e.pastCliffMs / e.elapsedMs).toBeLessThanOrEqual(0.2);
    expect(e.rejected).toBe(0);
    const g = metrics as Map<string, number> | null;
    expect(g).not.toBeNull();
    expect(g!.get('offpeak_model_concurrency_limit{model="engine-chat"}')).toBeGreaterThanOrEqual(1);
    expect(g!.get('offpeak_model_latency_seconds{model="engine-chat"}')).toBeGreaterThan(0.015);
    expect(g!.get('offpeak_model_latency_floor_seconds{model="engine-chat"}')).toBeGreaterThan(0.015);
  }, SCENARIO_MS);
});

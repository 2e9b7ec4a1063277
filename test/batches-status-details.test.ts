// docs/CONTRACT.md §18/§19: a running batch's record says when it should end
// (`estimated_completion_at`) and why it is not moving (`status_details`:
// upstream_down, rate_limited, queued; peak_hours is reserved), both null
// once it ends; the CLI's progress line and `batches get` show them. A real
// fake engine on loopback is stopped, answers 429, or is slow enough that a
// second batch waits for the one batch Worker. (The console's notice is
// checked in console.test.ts.)
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import type OpenAI from "openai";
import { createBatch, pollUntil, readResults, sleep, waitBatch, expectExactlyOnce } from "./helpers/batches";
import { plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { upstreamLines, writeUpstreamConfig } from "./helpers/outage";
import { startTestServer, type TestServer } from "./helpers/server";
import { clockTime, Progress, renderBar, renderPlain, waitingNote } from "../src/cli/progress";
import { batchEventsOf } from "../src/batches/events";
import { decide, estimate, QUEUED_MESSAGE, type Signals } from "../src/batches/statusDetails";
import { runCli, type CliRun as Run } from "./helpers/cli";
import { SCENARIO_MS } from "./helpers/wait";

/** The upstream's name in the config: what the messages name. */
const NAME = "vllm";
/** max_concurrency of the upstream. */
const C = 8;

let fake: FakeUpstream;
let t: TestServer;
let client: OpenAI;
let cleanup: () => void;
let work: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "offpeak-status-details-"));
  fake = await startFakeUpstream({ models: ["fake-chat"] });
  const cfg = writeUpstreamConfig("offpeak-status-details-", { name: NAME, base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: C });
  cleanup = cfg.cleanup;
  // One batch Worker: a second batch waits for it (queued).
  t = await startTestServer({ argv: ["--config", cfg.path], env: { OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_RETRY_BASE_MS: "10" } });
  client = t.sdk();
});

afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  cleanup?.();
  rmSync(work, { recursive: true, force: true });
});

interface Seen {
  /** Date.now() when read. */
  at: number;
  b: any;
}

/** The raw record (GET /batches/{id}), as a client without the SDK reads it. */
async function raw(id: string): Promise<any> {
  const res = await t.api(`/batches/${id}`);
  expect(res.status).toBe(200);
  return res.json();
}

/** Reads the record every `everyMs` until `done(record)`, keeping every one read. */
async function watch(id: string, done: (b: any) => boolean, timeoutMs: number, everyMs = 100): Promise<Seen[]> {
  const seen: Seen[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await raw(id);
    seen.push({ at: Date.now(), b });
    if (done(b)) return seen;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms; last record: ${JSON.stringify(b).slice(0, 1500)}`);
    await sleep(everyMs);
  }
}

/** The batch's row: what another node reads (both fields are in it, not in this node's memory). */
async function row(id: string) {
  const { batches } = t.server.ctx.db.t;
  const [r] = await t.server.ctx.db.select().from(batches).where(eq(batches.id, id));
  return { eta: r!.estimatedCompletionAt, code: r!.statusDetailsCode, message: r!.statusDetailsMessage, since: r!.statusDetailsSince };
}

const FINAL = ["completed", "failed", "expired", "cancelled"];
const isFinal = (b: any) => FINAL.includes(b.status);

/** Both fields are always in the record (null, not omitted: docs/CONTRACT.md §1). */
function expectFields(b: any): void {
  expect(Object.hasOwn(b, "estimated_completion_at") && Object.hasOwn(b, "status_details")).toBe(true);
  if (b.status_details !== null) {
    expect(Object.keys(b.status_details).sort()).toEqual(["code", "message", "since"]);
    expect(["upstream_down", "rate_limited", "peak_hours", "queued"]).toContain(b.status_details.code);
    expect(Number.isInteger(b.status_details.since)).toBe(true);
  }
  if (b.estimated_completion_at !== null) expect(Number.isInteger(b.estimated_completion_at)).toBe(true);
}

async function expectEndedClean(b: any): Promise<void> {
  expect({ status: b.status, eta: b.estimated_completion_at, details: b.status_details }).toEqual({ status: "completed", eta: null, details: null });
  expect(await row(b.id)).toEqual({ eta: null, code: null, message: null, since: null });
}

/** `offpeak ARGS` against the test server, run from the work directory. */
const cli = (args: string[]): Promise<Run> => runCli(args, { OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin }, work);

describe("estimated_completion_at", () => {
  test("null until a rate is known, then near when the batch really ends; null after; status_details null all along", async () => {
    fake.reset();
    fake.plan = null;
    // The engine sets the pace (≈ 5 s at 8 × 100 ms), slow enough that a busy machine keeps up with it:
    // an estimate is only as steady as the pace it extrapolates.
    fake.latencyMs = 100;
    const N = 400;
    const { batch } = await createBatch(client, upstreamLines("eta", N).text);
    const seen = await watch(batch.id, isFinal, 60_000);
    for (const s of seen) expectFields(s.b);
    const done = seen.at(-1)!.b;
    await expectEndedClean(done);
    // The record as created has no estimate yet.
    expect((batch as any).estimated_completion_at).toBeNull();
    const running = seen.filter((s) => s.b.status === "in_progress");
    const withEta = running.filter((s) => s.b.estimated_completion_at !== null);
    expect({ running: running.length > 5, withEta: withEta.length > 0 }).toEqual({ running: true, withEta: true });
    // Plausible: once a third is done, within 4 s (or 30% of the time then left, on a loaded machine) of the real end, and never in the past.
    const settled = withEta.filter((s) => s.b.request_counts.completed >= N / 3);
    expect(settled.length).toBeGreaterThan(0);
    for (const s of settled) {
      const eta = s.b.estimated_completion_at;
      expect({ eta, notPast: eta >= Math.floor(s.at / 1000) - 1, nearEnd: Math.abs(eta - done.completed_at) <= Math.max(4, 0.3 * (done.completed_at - s.at / 1000)), end: done.completed_at }).toEqual({ eta, notPast: true, nearEnd: true, end: done.completed_at });
    }
    // Nothing held it back.
    expect(seen.filter((s) => s.b.status_details !== null).map((s) => s.b.status_details)).toEqual([]);
  }, SCENARIO_MS);
});

describe("upstream_down", () => {
  const N = 2400;
  const { ids, text } = upstreamLines("down", N);
  let downAt = 0;
  let shown: any;

  test("appears on GET /batches/{id} within a few seconds of the upstream going away, and in the CLI (batches wait's progress line, batches get); clears when it returns; the batch completes", async () => {
    fake.reset();
    fake.plan = null;
    fake.latencyMs = 20;
    const { batch } = await createBatch(client, text);
    await pollUntil(async () => fake.stats.requests, (n) => n >= 300, 20_000, 10, "the batch to be partway");
    // `batches wait` follows the event stream from before the engine goes
    // away: the reason must come as an event of its own (no count moves then).
    const waiting = cli(["batches", "wait", batch.id, "--timeout", "6", "--progress-interval", "0.2"]);
    await pollUntil(async () => batchEventsOf(t.server.ctx).watchers, (n) => n >= 1, 10_000, 20, "batches wait to follow the events");
    await fake.down();
    downAt = Date.now();
    try {
      const seen = await watch(batch.id, (b) => b.status_details?.code === "upstream_down" || isFinal(b), 5000);
      shown = seen.at(-1)!.b;
      expect({ status: shown.status, code: shown.status_details?.code, message: shown.status_details?.message }).toEqual({ status: "in_progress", code: "upstream_down", message: `upstream ${NAME} is down` });
      expect(shown.status_details.since).toBeGreaterThanOrEqual(Math.floor(downAt / 1000) - 1);
      expect(shown.status_details.since).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
      // Not moving: no estimate.
      expect(shown.estimated_completion_at).toBeNull();
      // In the row, where any node of a cluster reads it.
      expect(await row(batch.id)).toMatchObject({ code: "upstream_down", message: `upstream ${NAME} is down` });
      // The CLI reads it while the engine is still away.
      await cliWhileDown(batch.id, shown, await waiting);
      await eventWithoutCounts(batch.id);
    } finally {
      await fake.up();
    }
    // Back: the reason goes while the batch still runs, and it ends with every line answered.
    const after = await watch(batch.id, (b) => b.status_details === null || isFinal(b), 10_000);
    const cleared = after.at(-1)!.b;
    expect({ status: cleared.status, details: cleared.status_details }).toEqual({ status: "in_progress", details: null });
    const done = await waitBatch(client, batch.id, undefined, 60_000);
    expect(done.request_counts).toEqual({ total: N, completed: N, failed: 0 });
    expectExactlyOnce(ids, await readResults(client, done.output_file_id), await readResults(client, done.error_file_id));
    await expectEndedClean(await raw(batch.id));
  }, SCENARIO_MS);

  /**
   * The event stream sends the record again when only status_details
   * changes (as when another node writes it): counts do not move while the
   * engine is away, and a follower must still hear why.
   */
  async function eventWithoutCounts(id: string): Promise<void> {
    const counts = (b: any) => JSON.stringify(b.request_counts);
    // The counts have settled (the last answers before the outage are in).
    let last = "";
    let stableSince = Date.now();
    await pollUntil(
      async () => {
        const c = counts(await raw(id));
        if (c !== last) [last, stableSince] = [c, Date.now()];
        return Date.now() - stableSince;
      },
      (ms) => ms >= 1500,
      15_000,
      100,
      "the counts to settle while the engine is away",
    );
    const ctrl = new AbortController();
    const records: any[] = [];
    const res = await t.api(`/batches/${id}/events`, { signal: ctrl.signal });
    const reading = (async () => {
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          buf += value;
          for (let end = buf.indexOf("\n\n"); end !== -1; end = buf.indexOf("\n\n")) {
            const data = buf.slice(0, end).split("\n").find((l) => l.startsWith("data:"));
            buf = buf.slice(end + 2);
            if (data) records.push(JSON.parse(data.slice(5)));
          }
        }
      } catch {
        /* aborted */
      }
    })();
    try {
      await pollUntil(async () => records.length, (n) => n >= 1, 5000, 20, "the first event");
      const { batches } = t.server.ctx.db.t;
      await t.server.ctx.db.update(batches).set({ statusDetailsMessage: `upstream ${NAME} is down (another node's words)` }).where(eq(batches.id, id));
      const got = await pollUntil(async () => records.at(-1), (b) => b?.status_details?.message === `upstream ${NAME} is down (another node's words)`, 3000, 20, "an event for the new status_details").catch(() => records.at(-1));
      expect({ counts: counts(got), message: got?.status_details?.message }).toEqual({ counts: last, message: `upstream ${NAME} is down (another node's words)` });
    } finally {
      ctrl.abort();
      await reading;
    }
  }

  /** `batches wait` (the event stream) and `batches get` while the upstream is down. */
  async function cliWhileDown(id: string, b: any, wait: Run): Promise<void> {
    const note = `waiting: upstream ${NAME} is down (since ${clockTime(b.status_details.since)})`;
    expect(wait.code).toBe(3);
    const lines = wait.stderr.split("\n").filter((l) => l.startsWith(`${id} in_progress`));
    expect({ lines: lines.length > 0, shows: lines.some((l) => l.endsWith(`; ${note}`)), got: lines.slice(-2) }).toEqual({ lines: true, shows: true, got: lines.slice(-2) });
    // Not moving: no ETA on that line.
    expect(lines.filter((l) => l.includes(note)).some((l) => l.includes("ETA"))).toBe(false);
    const get = await cli(["batches", "get", id]);
    expect(get.code).toBe(0);
    expect(JSON.parse(get.stdout).status_details).toMatchObject({ code: "upstream_down" });
    expect(get.stderr).toBe(`${id} in_progress: ${note}\n`);
  }
});

describe("a batch being stopped", () => {
  test("a cancel clears status_details and the estimate at once (cancelling is not waiting for the upstream); it ends cancelled with neither", async () => {
    fake.reset();
    fake.plan = null;
    fake.latencyMs = 20;
    const { batch } = await createBatch(client, upstreamLines("cancel", 2000).text);
    await pollUntil(async () => fake.stats.requests, (n) => n >= 200, 20_000, 10, "the batch to be partway");
    await fake.down();
    try {
      await watch(batch.id, (b) => b.status_details?.code === "upstream_down" || isFinal(b), 5000);
      const res = await t.api(`/batches/${batch.id}/cancel`, { method: "POST" });
      const c = (await res.json()) as any;
      expect({ status: c.status, details: c.status_details, eta: c.estimated_completion_at }).toEqual({ status: "cancelling", details: null, eta: null });
      // And it stays so while the lines drain (the runner writes nothing for a stopping batch).
      await sleep(1200);
      const later = await raw(batch.id);
      expect({ details: later.status_details, eta: later.estimated_completion_at }).toEqual({ details: null, eta: null });
    } finally {
      await fake.up();
    }
    const done = await waitBatch(client, batch.id, undefined, 30_000);
    expect(done.status).toBe("cancelled");
    const b = await raw(batch.id);
    expect({ details: b.status_details, eta: b.estimated_completion_at }).toEqual({ details: null, eta: null });
    expect(await row(batch.id)).toEqual({ eta: null, code: null, message: null, since: null });
  }, SCENARIO_MS);
});

describe("rate_limited", () => {
  test("appears while the upstream answers 429; the batch still completes with every line, and ends without it", async () => {
    fake.reset();
    fake.latencyMs = 20;
    let limiting = false;
    fake.plan = plans.when(() => limiting, { status: 429, retryAfter: 1 });
    const N = 1500;
    const { ids, text } = upstreamLines("limited", N);
    try {
      const { batch } = await createBatch(client, text);
      await pollUntil(async () => fake.stats.requests, (n) => n >= 200, 20_000, 10, "the batch to be partway");
      limiting = true;
      const seen = await watch(batch.id, (b) => b.status_details?.code === "rate_limited" || isFinal(b), 5000);
      limiting = false;
      const b = seen.at(-1)!.b;
      expect({ status: b.status, code: b.status_details?.code }).toEqual({ status: "in_progress", code: "rate_limited" });
      expect(b.status_details.message).toBe(`upstream ${NAME} answers 429 (rate limited): dispatch slowed`);
      const done = await waitBatch(client, batch.id, undefined, 60_000);
      expect(done.request_counts).toEqual({ total: N, completed: N, failed: 0 });
      expectExactlyOnce(ids, await readResults(client, done.output_file_id), await readResults(client, done.error_file_id));
      await expectEndedClean(await raw(batch.id));
    } finally {
      fake.plan = null;
    }
  }, SCENARIO_MS);
});

describe("queued", () => {
  test("a batch waiting for the one Worker (a long batch ahead) says queued; it then runs, and ends without it", async () => {
    fake.reset();
    fake.plan = null;
    // Lines of 6 KB: the long batch has two shards (4 MB each), so the
    // second batch is validated between them and then waits for the Worker.
    const pad = "x".repeat(6000);
    fake.latencyMs = (content) => (content.startsWith("long") ? 60 : 2);
    const long = upstreamLines("long", 1200);
    const longText = long.text.map((l) => l.replace(/"content":"([^"]*)"/, `"content":"$1 ${pad}"`));
    const { batch: a } = await createBatch(client, longText);
    await waitBatch(client, a.id, ["in_progress", ...FINAL], 20_000);
    const short = upstreamLines("short", 50);
    const { batch: b } = await createBatch(client, short.text);
    const seen = await watch(b.id, (x) => x.status_details?.code === "queued" || isFinal(x), 30_000);
    const q = seen.at(-1)!.b;
    expect({ status: q.status, code: q.status_details?.code, message: q.status_details?.message, eta: q.estimated_completion_at }).toEqual({
      status: "in_progress",
      code: "queued",
      message: QUEUED_MESSAGE,
      eta: null,
    });
    expect(Math.abs(q.status_details.since - Date.now() / 1000)).toBeLessThan(10);
    // The batch ahead runs: nothing holds it back (once the previous test's
    // 429s, which count for 5 s, have aged out).
    const ahead = (await watch(a.id, (x) => x.status_details === null || isFinal(x), 10_000)).at(-1)!.b;
    expect({ status: ahead.status, details: ahead.status_details }).toEqual({ status: "in_progress", details: null });
    const doneB = await waitBatch(client, b.id, undefined, 60_000);
    expect(doneB.request_counts).toEqual({ total: 50, completed: 50, failed: 0 });
    await expectEndedClean(await raw(b.id));
    const doneA = await waitBatch(client, a.id, undefined, 60_000);
    expect(doneA.request_counts).toEqual({ total: 1200, completed: 1200, failed: 0 });
    // Which ends first is the order's business, not this test's: B may take the Worker between A's
    // two shards (a claim made while A's first shard still counts as running sees A holding one).
    await expectEndedClean(await raw(a.id));
  }, SCENARIO_MS);
});

describe("a batch whose only line is in flight at the engine, beside a batch whose lines wait for slots", () => {
  // Two Workers, two slots: H's one line holds a slot at the engine for
  // seconds while O's many lines queue for the other. H is not moving, and
  // another batch on the model is, with lines waiting: but none of H's lines
  // waits, so H is running, not queued — and its record must not switch
  // between queued and null while nothing about it changes.
  let own: TestServer;
  let ownFake: FakeUpstream;
  let ownCleanup: () => void;
  const HANG_MS = 8000;
  beforeAll(async () => {
    ownFake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: (content) => (content.startsWith("hang") ? HANG_MS : 40) });
    const cfg = writeUpstreamConfig("offpeak-status-hang-", { name: NAME, base_url: ownFake.baseUrl, models: ["fake-chat"], max_concurrency: 2 });
    ownCleanup = cfg.cleanup;
    own = await startTestServer({ argv: ["--config", cfg.path], env: { OFFPEAK_BATCH_WORKERS: "2" } });
  });
  afterAll(async () => {
    await own?.stop();
    await ownFake?.stop();
    ownCleanup?.();
  });

  test("its status_details stays null all along (no queued, no flapping), and it sends no event while nothing changes", async () => {
    const c = own.sdk();
    const { batch: h } = await createBatch(c, upstreamLines("hang", 1).text);
    await pollUntil(async () => ownFake.stats.inFlight, (n) => n >= 1, 20_000, 20, "H's line at the engine");
    const { batch: o } = await createBatch(c, upstreamLines("other", 400).text);
    // H's event stream from now on: each event is a record that changed.
    const ctrl = new AbortController();
    const events: any[] = [];
    const following = (async () => {
      const res = await fetch(`${own.base}/batches/${h.id}/events`, { headers: { authorization: `Bearer ${own.admin}` }, signal: ctrl.signal });
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
          const data = buf.slice(0, i).split("\n").find((l) => l.startsWith("data: "));
          buf = buf.slice(i + 2);
          if (data) events.push(JSON.parse(data.slice(6)));
        }
      }
    })().catch(() => {});
    const reads: any[] = [];
    // While H's line is at the engine and O's lines wait for the other slot.
    await pollUntil(
      async () => {
        const [hb, ob] = await Promise.all([c.batches.retrieve(h.id), c.batches.retrieve(o.id)]);
        reads.push({ h: (hb as any).status_details, hDone: hb.request_counts!.completed, o: ob.request_counts!.completed });
        return hb;
      },
      (hb) => hb.request_counts!.completed === 1 || isFinal(hb),
      HANG_MS * 3,
      100,
      "H's line to be answered",
    );
    ctrl.abort();
    await following;
    const whileHanging = reads.filter((r) => r.hDone === 0);
    // O moved meanwhile (so a batch on the model was moving, with lines waiting), over more than the 2 s that make H "not moving".
    expect(whileHanging.length).toBeGreaterThan(20);
    expect(whileHanging.at(-1)!.o).toBeGreaterThan(whileHanging[0]!.o);
    expect(whileHanging.filter((r) => r.h !== null).map((r) => r.h)).toEqual([]);
    const withDetails = events.filter((e) => e.status_details != null).map((e) => e.status_details.code);
    expect(withDetails).toEqual([]);
    await waitBatch(c, o.id, undefined, 60_000);
  }, SCENARIO_MS);
});

// ── the pieces, without a server ───────────────────────────────────────────

describe("deciding and estimating", () => {
  const batch = { id: "batch_x", model: "m", total: 100, completionWindow: "24h", expiresAt: 0 };
  const signals = (over: Partial<{ down: number | null; limited: boolean; cap: "interactive" | "batches" | null }> = {}): Signals => ({
    upstream: () => ({ name: "u", downSince: over.down ?? null, rateLimited: over.limited ?? false }),
    waitingForCapacity: () => over.cap ?? null,
  });

  test("down before rate limited before peak hours before capacity; a slow batch holding the capacity itself is not queued", () => {
    const now = 1_700_000_000_000;
    const peak = () => "peak hours until 20:00";
    expect(decide(batch, signals({ down: now - 5000, limited: true }), true, true, now, peak)).toEqual({ code: "upstream_down", message: "upstream u is down", sinceMs: now - 5000 });
    expect(decide(batch, signals({ limited: true }), true, true, now, peak)?.code).toBe("rate_limited");
    expect(decide(batch, signals({ cap: "batches" }), true, true, now, peak)).toEqual({ code: "peak_hours", message: "peak hours until 20:00", sinceMs: null });
    expect(decide(batch, signals({ cap: "batches" }), true, true, now, null)?.code).toBe("queued");
    expect(decide(batch, signals({ cap: "interactive" }), true, false, now, null)?.code).toBe("queued");
    expect(decide(batch, signals({ cap: "batches" }), true, false, now, null)).toBeNull();
    expect(decide(batch, signals({ cap: "batches" }), false, true, now, null)).toBeNull();
    expect(decide(batch, signals(), true, true, now, null)).toBeNull();
  });

  test("an estimate needs a second of samples with progress; it is the rate over them", () => {
    expect(estimate([], 100, 0)).toBeNull();
    expect(estimate([[0, 0]], 100, 0)).toBeNull();
    expect(estimate([[0, 0], [500, 10]], 100, 500)).toBeNull();
    expect(estimate([[0, 10], [2000, 10]], 100, 2000)).toBeNull();
    // 20 lines/s, 60 left: 3 s after now.
    expect(estimate([[1_000_000, 0], [1_002_000, 40]], 100, 1_002_000)).toBe(1005);
  });

  test("the progress line: the server's ETA, and the reason it waits (a plain line at once when it appears)", () => {
    const now = Date.UTC(2030, 0, 2, 12, 0, 0);
    const note = waitingNote({ message: "upstream vllm is down", since: now / 1000 - 60 }, now);
    expect(note).toBe(`waiting: upstream vllm is down (since ${clockTime(now / 1000 - 60, now)})`);
    expect(clockTime(now / 1000 - 60, now)).toMatch(/^\d\d:\d\d$/);
    expect(waitingNote(null)).toBeNull();
    const s = { label: "in_progress", done: 50, total: 100, unit: "lines" as const };
    expect(renderPlain("b ", { ...s, eta: now / 1000 + 90 }, 10, now)).toBe("b in_progress 50/100 (50.0%) 10.0 lines/s ETA 1m30s");
    expect(renderPlain("b ", { ...s, note }, 10, now)).toBe(`b in_progress 50/100 (50.0%) 10.0 lines/s; ${note}`);
    expect(renderBar({ ...s, note }, null, 200, now)).toContain(note!);
    const out: string[] = [];
    const p = new Progress({ sink: { write: (x: string) => out.push(x) }, tty: false, plainEveryMs: 60_000 });
    p.update(s, now);
    p.update({ ...s, done: 51 }, now + 1000);
    p.update({ ...s, done: 51, note }, now + 2000);
    p.update({ ...s, done: 52 }, now + 3000);
    expect(out.map((l) => l.trimEnd())).toEqual(["in_progress 50/100 (50.0%)", `in_progress 51/100 (51.0%) 0.5 lines/s; ${note}`, "in_progress 52/100 (52.0%) 0.7 lines/s ETA 1m12s"]);
  });
});

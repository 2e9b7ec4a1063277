// The upstream-call Deadline: a timeout that is cleared with the call, an
// idle timeout for streams, and a late link to the client's signal.
import { describe, expect, test } from "bun:test";
import { Deadline } from "../src/inference/upstream/deadline";
import { waitFor } from "./helpers/wait";

// Times here are long beside what a busy machine adds to a timer (tens of
// ms under a CPU quota): a test judges order (not before its time; after it,
// once a wait for the condition sees it), never a tight window.

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const abortedWithin = (signal: AbortSignal, ms: number) =>
  new Promise<boolean>((resolve) => {
    if (signal.aborted) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve(true)), { once: true });
  });

describe("Deadline", () => {
  test("times out after its time, and says so", async () => {
    const d = new Deadline(400);
    expect(await abortedWithin(d.signal, 200)).toBe(false);
    expect(await abortedWithin(d.signal, 5000)).toBe(true);
    expect(d.timedOut).toBe(true);
    expect((d.signal.reason as DOMException).name).toBe("TimeoutError");
  });

  test("with a client signal, still times out after its whole time", async () => {
    const parent = new AbortController();
    const t0 = performance.now();
    const d = new Deadline(150, () => parent.signal);
    expect(await abortedWithin(d.signal, 1000)).toBe(true);
    const took = performance.now() - t0;
    expect({ timedOut: d.timedOut, early: took < 140 }).toEqual({ timedOut: true, early: false });
  });

  test("a call that lasts: the client's signal aborting aborts the call at once", async () => {
    const parent = new AbortController();
    let reads = 0;
    const d = new Deadline(10_000, () => (reads++, parent.signal));
    await waitFor(() => reads > 0, "the client's signal to be linked (after 25–50 ms)");
    expect(d.signal.aborted).toBe(false);
    parent.abort(new Error("client left"));
    expect(d.signal.aborted).toBe(true);
    expect(d.timedOut).toBe(false);
    d.clear();
  });

  test("a client gone before the link: the call is aborted when it is linked", async () => {
    const parent = new AbortController();
    parent.abort(new Error("gone"));
    const d = new Deadline(10_000, () => parent.signal);
    expect(await abortedWithin(d.signal, 500)).toBe(true);
    expect(d.timedOut).toBe(false);
    d.clear();
  });

  test("a call over within the link delay never reads the client's signal (Bun makes it on first read)", async () => {
    let reads = 0;
    const parent = new AbortController();
    const d = new Deadline(10_000, () => (reads++, parent.signal));
    d.clear();
    await sleep(120);
    parent.abort();
    expect({ reads, aborted: d.signal.aborted }).toEqual({ reads: 0, aborted: false });
  });

  test("clear() stops the timeout and the link: nothing aborts afterwards", async () => {
    const parent = new AbortController();
    const d = new Deadline(400, () => parent.signal);
    await sleep(100);
    d.clear();
    await sleep(600);
    parent.abort();
    expect(await abortedWithin(d.signal, 200)).toBe(false);
  });

  test("restart() makes it an idle timeout", async () => {
    const d = new Deadline(600);
    for (let i = 0; i < 4; i++) {
      await sleep(150);
      d.restart();
    }
    expect(d.signal.aborted).toBe(false); // 600 ms in all, never 600 idle
    expect(await abortedWithin(d.signal, 5000)).toBe(true);
    expect(d.timedOut).toBe(true);
  });

  test("many at once: clearing some (first, middle, last made) leaves the others to expire on time", async () => {
    const ds = Array.from({ length: 9 }, (_, i) => new Deadline(60 + (i % 3) * 20));
    for (const i of [0, 4, 8]) ds[i]!.clear();
    await waitFor(() => ds.filter((d) => d.timedOut).length >= 6, "the six left to expire");
    await sleep(200);
    expect(ds.map((d) => d.timedOut)).toEqual([false, true, true, true, false, true, true, true, false]);
    // A deadline made after the others expired (the sweep stopped when none was left) still fires.
    const late = new Deadline(50);
    expect(await abortedWithin(late.signal, 5000)).toBe(true);
  });

  test("a listener (offpeak's own client) is told once, with the reason, and needs no AbortSignal; a signal asked for later is already aborted", async () => {
    const told: unknown[] = [];
    const d = new Deadline(60);
    d.listen({ onAbort: (reason) => told.push(reason) });
    await waitFor(() => d.aborted, "the deadline to pass");
    await sleep(100);
    expect(d.aborted).toBe(true);
    expect(d.timedOut).toBe(true);
    expect(told).toHaveLength(1);
    expect((told[0] as DOMException).name).toBe("TimeoutError");
    expect(d.signal.aborted).toBe(true);
    expect(d.signal.reason).toBe(told[0]);
  });

  test("the client leaving reaches the listener; a listener removed (call over) hears nothing", async () => {
    const parent = new AbortController();
    const told: unknown[] = [];
    let reads = 0;
    const d = new Deadline(10_000, () => (reads++, parent.signal));
    d.listen({ onAbort: (reason) => told.push(reason) });
    await waitFor(() => reads > 0, "the client's signal to be linked"); // past the link delay
    parent.abort(new DOMException("gone", "AbortError"));
    expect(told.map((r) => (r as DOMException).message)).toEqual(["gone"]);
    expect(d.timedOut).toBe(false);

    const quiet = new Deadline(40);
    const heard: unknown[] = [];
    quiet.listen({ onAbort: (r) => heard.push(r) });
    quiet.listen(null);
    await waitFor(() => quiet.aborted, "the quiet deadline to pass");
    expect(quiet.aborted).toBe(true);
    expect(heard).toEqual([]);
  });
});

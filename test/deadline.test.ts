// The upstream-call Deadline: a timeout that is cleared with the call, an
// idle timeout for streams, and a link to the client's signal.
import { describe, expect, test } from "bun:test";
import { Deadline } from "../src/inference/deadline";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const abortedWithin = (signal: AbortSignal, ms: number) =>
  new Promise<boolean>((resolve) => {
    if (signal.aborted) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve(true)), { once: true });
  });

describe("Deadline", () => {
  test("times out after its time, and says so", async () => {
    const d = new Deadline(80);
    expect(await abortedWithin(d.signal, 40)).toBe(false);
    expect(await abortedWithin(d.signal, 400)).toBe(true);
    expect(d.timedOut).toBe(true);
    expect((d.signal.reason as DOMException).name).toBe("TimeoutError");
  });

  test("with a parent, still times out after its whole time", async () => {
    const parent = new AbortController();
    const t0 = performance.now();
    const d = new Deadline(150, parent.signal);
    expect(await abortedWithin(d.signal, 1000)).toBe(true);
    const took = performance.now() - t0;
    expect({ timedOut: d.timedOut, early: took < 140 }).toEqual({ timedOut: true, early: false });
  });

  test("a parent (the client's signal) that aborts aborts the call at once", async () => {
    const parent = new AbortController();
    const d = new Deadline(10_000, parent.signal);
    await sleep(30);
    expect(d.signal.aborted).toBe(false);
    parent.abort(new Error("client left"));
    expect(d.signal.aborted).toBe(true);
    expect(d.timedOut).toBe(false);
    d.clear();
  });

  test("an already aborted parent aborts the call at once", () => {
    const parent = new AbortController();
    parent.abort(new Error("gone"));
    const d = new Deadline(10_000, parent.signal);
    expect(d.signal.aborted).toBe(true);
    d.clear();
  });

  test("clear() stops the timeout and the link: nothing aborts afterwards", async () => {
    const parent = new AbortController();
    const d = new Deadline(60, parent.signal);
    d.clear();
    await sleep(120);
    parent.abort();
    expect(await abortedWithin(d.signal, 50)).toBe(false);
  });

  test("restart() makes it an idle timeout", async () => {
    const d = new Deadline(120);
    for (let i = 0; i < 4; i++) {
      await sleep(60);
      d.restart();
    }
    expect(d.signal.aborted).toBe(false); // 240 ms in all, never 120 idle
    expect(await abortedWithin(d.signal, 600)).toBe(true);
    expect(d.timedOut).toBe(true);
  });
});

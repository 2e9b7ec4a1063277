// The prefix window of a shard (src/batches/worker/prefixGroups.ts): lines
// sharing a prefix leave it together, a few groups at a time, each group
// until it is empty; every line leaves exactly once; its bounds say full.
import { describe, expect, test } from "bun:test";
import { MAX_LINES, PrefixGroups } from "../src/batches/worker/prefixGroups";

const drain = <T>(g: PrefixGroups<T>): T[] => {
  const out: T[] = [];
  for (let x = g.next(); x !== undefined; x = g.next()) out.push(x);
  return out;
};

describe("the prefix window", () => {
  test("lines in random order leave grouped by prefix, two groups open at a time", () => {
    const g = new PrefixGroups<string>(2);
    // 6 prefixes, 10 lines each, interleaved as a shuffled file would have them.
    const order: string[] = [];
    for (let i = 0; i < 10; i++) for (const k of [3, 1, 5, 0, 4, 2]) order.push(`${k}-${i}`);
    for (const line of order) g.add(Number(line.split("-")[0]), line, 10);
    const out = drain(g);
    expect(out.slice().sort()).toEqual(order.slice().sort());
    const keys = out.map((l) => l.split("-")[0]);
    // At any time at most two prefixes have started and not yet finished.
    const seen = new Set<string>();
    let closed = 0;
    const left = new Map<string, number>(["0", "1", "2", "3", "4", "5"].map((k) => [k, 10]));
    for (const k of keys) {
      seen.add(k);
      left.set(k, left.get(k)! - 1);
      if (left.get(k) === 0) closed++;
      // Open groups = seen and not yet empty: at most 2 at any time.
      expect(seen.size - closed).toBeLessThanOrEqual(2);
    }
  });

  test("the group with the most lines waiting opens first", () => {
    const g = new PrefixGroups<string>(1);
    g.add(7, "a", 1);
    for (let i = 0; i < 3; i++) g.add(9, `b${i}`, 1);
    expect(drain(g)).toEqual(["b0", "b1", "b2", "a"]);
  });

  test("full at MAX_LINES lines, and by characters; sent() gives characters back", () => {
    const g = new PrefixGroups<number>(4);
    for (let i = 0; i < MAX_LINES - 1; i++) g.add(i % 3, i, 1);
    expect(g.full).toBe(false);
    g.add(1, -1, 1);
    expect(g.full).toBe(true);
    g.next();
    g.sent(1);
    expect(g.full).toBe(false);
    const big = new PrefixGroups<number>(1);
    big.add(1, 1, 40 * 1024 * 1024);
    expect(big.full).toBe(true);
    big.next();
    big.sent(40 * 1024 * 1024);
    expect(big.full).toBe(false);
  });
});

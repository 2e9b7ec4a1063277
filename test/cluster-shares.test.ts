// Splitting a cluster-wide total into whole parts (src/nodes/membership.ts:
// a limited model's max_concurrency, evenly over the live nodes).
import { expect, test } from "bun:test";
import { splitByWeight } from "../src/nodes/parts";

test("equal weights: as even as whole numbers allow, the remainder to the first nodes", () => {
  expect(splitByWeight(48, [1, 1, 1])).toEqual([16, 16, 16]);
  expect(splitByWeight(10, [1, 1, 1])).toEqual([4, 3, 3]);
  expect(splitByWeight(2, [1, 1, 1])).toEqual([1, 1, 0]);
});

test("unequal weights: proportional, by largest remainder", () => {
  expect(splitByWeight(256, [1, 5, 5])).toEqual([23, 117, 116]);
  expect(splitByWeight(256, [3, 3, 1])).toEqual([110, 110, 36]);
});

test("the parts always add up to exactly the total", () => {
  for (let seed = 1; seed < 500; seed++) {
    const n = 1 + (seed % 7);
    const weights = Array.from({ length: n }, (_, i) => 1 + ((seed * (i + 3)) % 9));
    const total = (seed * 37) % 300;
    const parts = splitByWeight(total, weights);
    expect(parts.reduce((a, b) => a + b, 0)).toBe(total);
    for (const p of parts) expect(p).toBeGreaterThanOrEqual(0);
  }
});

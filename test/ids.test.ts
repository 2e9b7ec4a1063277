// Ids: a prefix and 24 base62 characters from the CSPRNG, every character
// equally likely (src/ids.ts draws them in bulk and cuts ids from a string).
import { expect, test } from "bun:test";
import { IdStream, isId, newId } from "../src/ids";

test("ids have their prefix and 24 base62 characters, and do not repeat", () => {
  const s = new IdStream();
  const seen = new Set<string>();
  for (let i = 0; i < 100_000; i++) {
    const id = s.next("req_");
    expect(isId("req_", id)).toBe(true);
    seen.add(id);
  }
  expect(seen.size).toBe(100_000);
  expect(isId("file-", newId("file-"))).toBe(true);
});

test("every base62 character is about equally likely, across refills of the random pool", () => {
  const s = new IdStream();
  const counts = new Map<string, number>();
  const ids = 50_000; // 1.2M characters: several 64 KB refills
  for (let i = 0; i < ids; i++) for (const c of s.next("")) counts.set(c, (counts.get(c) ?? 0) + 1);
  expect(counts.size).toBe(62);
  const expected = (ids * 24) / 62;
  // Chi-square with 61 degrees of freedom: above 120 has probability < 1e-5 for a uniform source.
  let chi2 = 0;
  for (const n of counts.values()) chi2 += (n - expected) ** 2 / expected;
  expect(chi2).toBeLessThan(120);
});

// HashSet64 keeps every custom_id fingerprint of an upload; growing must
// keep every entry (a lost one would let a duplicate custom_id through).
import { describe, expect, test } from "bun:test";
import { HashSet64 } from "../src/jsonl/hashSet64";

describe("HashSet64", () => {
  test("keeps every id across several growths and finds each repeat", () => {
    const set = new HashSet64(16);
    const n = 200_000;
    for (let i = 0; i < n; i++) expect(set.addString(`req-${i}`)).toBe(true);
    expect(set.size).toBe(n);
    let repeatsFound = 0;
    for (let i = 0; i < n; i++) if (!set.addString(`req-${i}`)) repeatsFound++;
    expect(repeatsFound).toBe(n);
    expect(set.size).toBe(n);
  });

  test("bytes and strings fingerprint alike; the all-zero fingerprint is a valid entry", () => {
    const set = new HashSet64();
    const bytes = new TextEncoder().encode("xx-naïve-id-xx");
    expect(set.addBytes(bytes, 3, bytes.length - 3)).toBe(true);
    expect(set.addString("naïve-id")).toBe(false);
    expect(set.add(0, 0)).toBe(true);
    expect(set.add(0, 0)).toBe(false);
    expect(set.add(-1, 0x7fffffff)).toBe(true);
    expect(set.add(0xffffffff, 0x7fffffff)).toBe(false);
  });
});

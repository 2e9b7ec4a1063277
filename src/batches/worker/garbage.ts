// This Worker's garbage, collected on a budget. JavaScriptCore collects a
// Worker's heap when it has grown by a share of itself, and a batch Worker's
// heap is mostly garbage: the decoded input, the parsed lines, the result
// strings, dead once written. Left to itself, a Worker running built-in
// lines let it reach 25–31 MB (the heap sampled in each Worker:
// docs/benchmarks/history.md, Many cores), and `{ smol: true }` (JavaScriptCore's small heap) changed
// none of it: the decoded input chunks and result strings are "extra"
// memory, not cells. A full collection every COLLECT_EVERY_CHARS characters
// of lines read and written holds it to ≈10 MB: the 1M-line echo batch with
// 2 Workers peaked at 174–187 MB instead of 202–223, in 6.04 s against 6.39
// (medians of 8 alternating rounds, bench/workers-rss.ts). It costs ≈290
// collections of ≈2.5 ms for the 1M lines.
import { fullGC } from "bun:jsc";

/** Characters of lines (read and written) between two full collections. */
export const COLLECT_EVERY_CHARS = 4 << 20;

let since = 0;
const stats = { collections: 0, ms: 0 };

/** Counts `chars` of work (a line read or written); collects when they reach the budget. */
export function worked(chars: number): void {
  since += chars;
  if (since >= COLLECT_EVERY_CHARS) collect();
}

/**
 * A full collection now, unless less than `minChars` of work was done since
 * the last one. `giveBack`: a Worker about to wait frees its garbage now
 * (Bun.gc(true): collected and swept at once). A collection alone (fullGC)
 * leaves the dead strings to be swept while the heap allocates again, which
 * a waiting Worker does not: in a Worker that had made some 55 MB of
 * garbage, the process's RSS stayed at 98 MB after fullGC (≈1 ms), and fell
 * to 44 MB after Bun.gc(true) (21–23 ms).
 */
export function collect(minChars = 1, giveBack = false): void {
  if (since < minChars) return;
  since = 0;
  const t0 = performance.now();
  if (giveBack) Bun.gc(true);
  else fullGC();
  stats.collections++;
  stats.ms += performance.now() - t0;
}

/** Full collections so far, and the ms they took (the turn tests read them). */
export function collections(): Readonly<typeof stats> {
  return stats;
}

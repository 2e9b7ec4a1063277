// Whole parts of what a cluster shares (a model's limit, the peak cap, the
// shards waiting for a yield), split among the live nodes so that they add
// up to exactly the total. Pure arithmetic, imported by Workers too.

/**
 * `total` in whole parts proportional to `weights` (largest remainder; ties
 * to the earlier entries): the parts add up to exactly `total`.
 */
export function splitByWeight(total: number, weights: number[]): number[] {
  const sum = weights.reduce((a, w) => a + w, 0);
  const parts = weights.map((w, i) => {
    const exact = (total * w) / sum;
    return { i, base: Math.floor(exact), frac: exact - Math.floor(exact) };
  });
  let rest = total - parts.reduce((a, p) => a + p.base, 0);
  for (const p of [...parts].sort((a, b) => b.frac - a.frac || a.i - b.i)) {
    if (rest <= 0) break;
    p.base++;
    rest--;
  }
  return parts.map((p) => p.base);
}

/**
 * Node `index`'s part of `total` split evenly over `count` nodes, in whole
 * parts that add up to exactly `total`; the odd units go to the nodes in
 * turn (`turn`: a number every node computes alike, e.g. the minute), so no
 * node is left without a part for good.
 */
export function partInTurn(total: number, index: number, count: number, turn: number): number {
  return Math.floor(total / count) + ((((index - turn) % count) + count) % count < total % count ? 1 : 0);
}

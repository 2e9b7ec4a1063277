// The custom_id duplicate check alone (src/jsonl/duplicateFinder.ts), one
// thread, no server: N distinct ids ("request-<n>", written into a reused
// buffer, so the loop allocates nothing of its own) fed in IdBatches as the
// upload's scanner sends them, with each memory bound in a fresh process
// (its peak RSS is then the check's, over a ≈30 MB bare process), rounds
// alternating. Spill files go to a temp dir under bench/data (on disk).
//
// Usage: bun bench/finder-bench.ts [lines=10000000] [rounds=2] [bytes,bytes,…]
//   (bounds in bytes; "unbounded" = the whole set in memory, as before the spill existed)
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { DuplicateFinder, IdBatcher } from "../src/jsonl/duplicateFinder";
import { peakRssMb } from "./lib";

if (process.argv[2] === "--child") {
  const [n, bound, dir] = [Number(process.argv[3]), process.argv[4]!, process.argv[5]!];
  const finder = bound === "unbounded" ? new DuplicateFinder() : new DuplicateFinder({ memoryBytes: Number(bound), spillPath: join(dir, "x") });
  const batcher = new IdBatcher();
  const id = new Uint8Array(32);
  const prefix = new TextEncoder().encode("request-");
  id.set(prefix);
  const t0 = performance.now();
  for (let i = 1; i <= n; i++) {
    let digits = 1;
    for (let v = i; v >= 10; v = Math.floor(v / 10)) digits++;
    for (let v = i, k = prefix.length + digits - 1; k >= prefix.length; k--, v = Math.floor(v / 10)) id[k] = 48 + (v % 10);
    batcher.add(i, id, 0, prefix.length + digits);
    // ≈3,700 lines per 1 MB block in the generated files: one IdBatch each.
    if (i % 3700 === 0 || i === n) {
      const batch = batcher.take()!;
      finder.addBatch(batch);
      batcher.recycle(batch);
    }
  }
  const t1 = performance.now();
  const report = finder.report();
  const t2 = performance.now();
  const hwm = peakRssMb(process.pid);
  console.log(JSON.stringify({ stream_s: (t1 - t0) / 1000, check_s: (t2 - t1) / 1000, suspects: report.suspects.length, spilled: report.spilled, peak_rss_mb: hwm }));
  process.exit(0);
}

const lines = Number(process.argv[2] ?? 10_000_000);
const rounds = Number(process.argv[3] ?? 2);
const bounds = (process.argv[4] ?? `unbounded,${16 << 20},${4 << 20},${1 << 20}`).split(",");
const dir = mkdtempSync(join(import.meta.dir, "data", "finder-bench-"));
const results = new Map<string, { stream_s: number; check_s: number; peak_rss_mb: number; spilled: number }[]>();
try {
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < bounds.length; k++) {
      const bound = bounds[(r + k) % bounds.length]!;
      const p = Bun.spawn([process.execPath, import.meta.path, "--child", String(lines), bound, dir], { stdout: "pipe", stderr: "inherit" });
      const out = await new Response(p.stdout).text();
      if ((await p.exited) !== 0) throw new Error(`child failed for ${bound}`);
      const res = JSON.parse(out);
      if (res.suspects !== 0) throw new Error(`suspects in distinct ids: ${out}`);
      (results.get(bound) ?? results.set(bound, []).get(bound)!).push(res);
    }
  }
  console.log(`finder-bench: ${lines} distinct ids, ${rounds} rounds (min shown, then each round)`);
  for (const bound of bounds) {
    const rs = results.get(bound)!;
    const label = bound === "unbounded" ? "unbounded" : `${(Number(bound) / 2 ** 20).toFixed(Number(bound) < 2 ** 20 ? 3 : 0)} MiB`;
    const total = (x: { stream_s: number; check_s: number }) => x.stream_s + x.check_s;
    const best = rs.reduce((a, b) => (total(a) <= total(b) ? a : b));
    console.log(
      `${label.padEnd(10)} stream ${best.stream_s.toFixed(2)} s + check ${best.check_s.toFixed(2)} s = ${total(best).toFixed(2)} s; spilled ${best.spilled}; peak RSS ${Math.max(...rs.map((x) => x.peak_rss_mb)).toFixed(0)} MB  [${rs.map((x) => total(x).toFixed(2)).join(", ")}]`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

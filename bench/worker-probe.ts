// A batch Worker (src/batches/worker/entry.ts, loaded whole) with a probe
// beside it, for bench/worker-memory.ts: every 10 ms it samples this
// Worker's own JavaScriptCore heap (process.memoryUsage() in a Worker: the
// GC heap's size and capacity, the "extra" memory it was told of — string
// and ArrayBuffer storage — and the ArrayBuffers) and keeps the largest
// figures. (bun:jsc heapStats() gives the same and more, but takes ≈0.8 ms:
// every 10 ms in 16 Workers, that was most of 2 cores.) A { type: "probe" }
// message answers them, the number of modules this Worker loaded and the
// full collections it made itself (src/batches/worker/garbage.ts).
// The entry ignores message types it does not know, so both listen.
import "../src/batches/worker/entry.ts";
import { collections } from "../src/batches/worker/garbage";
import { turnWaits } from "../src/batches/worker/turns";

declare const self: Worker;

const max = { heap: 0, extra: 0, capacity: 0, arrayBuffers: 0 };
const sample = () => {
  const m = process.memoryUsage();
  max.heap = Math.max(max.heap, m.heapUsed);
  max.extra = Math.max(max.extra, m.external);
  max.capacity = Math.max(max.capacity, m.heapTotal);
  max.arrayBuffers = Math.max(max.arrayBuffers, m.arrayBuffers);
  return m;
};
setInterval(sample, 10);

self.addEventListener("message", (e: MessageEvent<{ type: string }>) => {
  if (e.data?.type !== "probe") return;
  const m = sample();
  self.postMessage({ type: "probe", max: { ...max }, now: { heap: m.heapUsed, extra: m.external, capacity: m.heapTotal }, modules: Object.keys(require.cache).length, collections: collections(), waits: turnWaits() });
});

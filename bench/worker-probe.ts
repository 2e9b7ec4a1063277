// A batch Worker (src/batches/worker/entry.ts, loaded whole) with a probe
// beside it, for bench/worker-memory.ts: every 10 ms it samples this
// Worker's own JavaScriptCore heap (bun:jsc heapStats: the GC heap, the
// "extra" memory it was told of — string and ArrayBuffer storage — and the
// heap's capacity) and keeps the largest figures; a { type: "probe" }
// message answers them and the number of modules this Worker loaded.
// The entry ignores message types it does not know, so both listen.
import "../src/batches/worker/entry.ts";
import { heapStats } from "bun:jsc";

declare const self: Worker;

const max = { heap: 0, extra: 0, capacity: 0, arrayBuffers: 0 };
const sample = () => {
  const h = heapStats();
  max.heap = Math.max(max.heap, h.heapSize);
  max.extra = Math.max(max.extra, h.extraMemorySize);
  max.capacity = Math.max(max.capacity, h.heapCapacity);
  max.arrayBuffers = Math.max(max.arrayBuffers, process.memoryUsage().arrayBuffers);
};
setInterval(sample, 10);

self.addEventListener("message", (e: MessageEvent<{ type: string }>) => {
  if (e.data?.type !== "probe") return;
  sample();
  const h = heapStats();
  self.postMessage({ type: "probe", max: { ...max }, now: { heap: h.heapSize, extra: h.extraMemorySize, capacity: h.heapCapacity }, modules: Object.keys(require.cache).length });
});

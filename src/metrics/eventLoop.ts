// Event-loop delay of the main thread: a timer due every 10 ms, and how late
// each tick comes (its interval minus 10 ms), observed into
// offpeak_event_loop_delay_seconds. Anything that holds the main thread
// (a synchronous loop over data, a long SQLite statement, a GC pause) shows
// up as one late tick of about its length. node:perf_hooks'
// monitorEventLoopDelay works in Bun 1.4.5 too, but it only keeps summary
// figures (min, max, percentiles) since it was enabled, not one value per
// tick to put into histogram buckets; this costs 100 wakeups a second, ~1 µs
// each. One monitor per process, however many servers it runs (tests).
import { m } from "./index";

const INTERVAL_MS = 10;

let users = 0;
let timer: ReturnType<typeof setInterval> | null = null;
let maxSeconds = 0;

/** Starts the monitor (idempotent across servers in one process); returns its stop. */
export function startEventLoopMonitor(): () => void {
  users++;
  if (!timer) {
    const observe = m.eventLoopDelay.bind([]);
    let last = performance.now();
    timer = setInterval(() => {
      const now = performance.now();
      const late = Math.max(0, now - last - INTERVAL_MS) / 1000;
      last = now;
      if (late > maxSeconds) m.eventLoopDelayMax.set([], (maxSeconds = late));
      observe(late);
    }, INTERVAL_MS);
    timer.unref?.();
  }
  let stopped = false;
  return () => {
    if (stopped) return;
    stopped = true;
    if (--users === 0 && timer) {
      clearInterval(timer);
      timer = null;
    }
  };
}

/** The largest delay seen since the process started, in seconds. */
export const eventLoopDelayMaxSeconds = () => maxSeconds;

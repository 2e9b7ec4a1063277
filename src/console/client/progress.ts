// Rate and ETA of a running batch, from the request_counts it reports over
// time (a smoothed rate between samples; before there are two samples, the
// average since in_progress_at). The ETA is the server's
// estimated_completion_at when it gives one.
import type { Batch } from "./types";

export const FINAL = ["completed", "failed", "expired", "cancelled"];
export const isFinal = (b: Batch) => FINAL.includes(b.status);

interface Sample {
  t: number;
  done: number;
  rate: number | null;
}

const samples = new Map<string, Sample>();

export function speedOf(b: Batch, now = Date.now()): { rate: number | null; eta: number | null; took: number | null } {
  const { total, completed, failed } = b.request_counts;
  const done = completed + failed;
  if (isFinal(b)) {
    samples.delete(b.id);
    const end = b.completed_at ?? b.cancelled_at ?? b.expired_at ?? b.failed_at;
    const took = end && b.in_progress_at ? Math.max(0, end - b.in_progress_at) : null;
    return { rate: took && done ? done / Math.max(1, took) : null, eta: null, took };
  }
  if (b.status !== "in_progress" || total === 0) return { rate: null, eta: null, took: null };
  let s = samples.get(b.id);
  if (!s) samples.set(b.id, (s = { t: now, done, rate: null }));
  else if (done !== s.done && now - s.t >= 400) {
    const inst = ((done - s.done) * 1000) / (now - s.t);
    s.rate = s.rate === null ? inst : s.rate * 0.6 + inst * 0.4;
    s.t = now;
    s.done = done;
  } else if (done === s.done && s.rate !== null && now - s.t > 5000) {
    // Nothing moved for a while (an upstream outage): say so instead of an old rate.
    s.rate = 0;
  }
  const since = b.in_progress_at ? now / 1000 - b.in_progress_at : 0;
  const rate = s.rate ?? (since >= 1 && done > 0 ? done / since : null);
  // The server's estimate when it has one (docs/CONTRACT.md §18: from its own recent rate); none while it says the batch waits.
  const server = b.estimated_completion_at ? Math.max(0, b.estimated_completion_at - now / 1000) : null;
  const eta = server ?? (b.status_details ? null : rate && rate > 0 ? (total - done) / rate : null);
  return { rate, eta, took: null };
}

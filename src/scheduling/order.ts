// The order batches are served in (docs/CONTRACT.md §18).
//
// One order, used in both places where batches compete: where shards are
// claimed for Workers (db/claims.ts, from the database, so every node of a
// cluster follows it) and where batch lines wait for a model's slots
// (inference/admission/scheduler.ts, the BatchQueue below). It is:
//
//   1. the deadline's hour (expires_at / hour, floored): earlier first;
//      deadlines in the same hour count as equal;
//   2. then projects in turn: the one served least recently (in the
//      scheduler) / holding fewest running shards (in claims) goes next;
//   3. then that project's batches in turn, the same way; then the lines of
//      one batch in arrival order.
//
// Starvation-free by construction: a waiting batch B with deadline hour H
// can only be passed by batches of an hour ≤ H. New batches have deadlines
// of at least now + 1h, so once the clock is within an hour of H no new
// batch can come before B: those ahead of it are a finite set. Within its
// hour, each grant goes to the project at the head of a rotation and moves
// it to the back (likewise batches within a project), so with P projects and
// K batches in B's project, B is served within P × K grants of its hour
// being first — every waiting batch is served within a bounded number of
// grants, however many lines the others have.

/** What places a batch in the order; one object per batch, shared by its waiters (`capped` changes in place). */
export interface BatchKey {
  /** floor(expires_at / hour): earlier first. */
  bucket: number;
  project: string;
  batch: string;
  /** Held to the model's peak share now (window ≥ 24h during peak hours, not overridden). */
  capped: boolean;
}

export const NO_KEY: BatchKey = { bucket: Number.MAX_SAFE_INTEGER, project: "", batch: "", capped: false };

export function bucketOf(expiresAtS: number, hourSeconds: number): number {
  return Math.floor(expiresAtS / hourSeconds);
}

interface Keyed {
  cancelled: boolean;
  key?: BatchKey;
}

/** Round-robin list: served entries go to the back. */
class Ring<K, V> {
  readonly m = new Map<K, V>();
  /** Moves `k` behind the others (a Map iterates in insertion order). */
  rotate(k: K): void {
    const v = this.m.get(k);
    if (v === undefined) return;
    this.m.delete(k);
    this.m.set(k, v);
  }
}

/**
 * Batch lines waiting for one model's slots, in the order above. `take`
 * hands out the first waiter that `allow` accepts (a capped batch at its
 * cap is skipped, not a wall for the uncapped behind it).
 */
export class BatchQueue<W extends Keyed> {
  private readonly buckets = new Map<number, Ring<string, Ring<string, W[]>>>();
  private sorted: number[] = [];
  private n = 0;

  get length(): number {
    return this.n;
  }

  push(w: W): void {
    const k = w.key ?? NO_KEY;
    let b = this.buckets.get(k.bucket);
    if (!b) {
      this.buckets.set(k.bucket, (b = new Ring()));
      this.sorted = [...this.buckets.keys()].sort((x, y) => x - y);
    }
    let p = b.m.get(k.project);
    if (!p) b.m.set(k.project, (p = new Ring()));
    let q = p.m.get(k.batch);
    if (!q) p.m.set(k.batch, (q = []));
    q.push(w);
    this.n++;
  }

  remove(w: W): boolean {
    const k = w.key ?? NO_KEY;
    const q = this.buckets.get(k.bucket)?.m.get(k.project)?.m.get(k.batch);
    const i = q ? q.indexOf(w) : -1;
    if (i === -1) return false;
    q!.splice(i, 1);
    this.n--;
    this.prune(k);
    return true;
  }

  /** Whether lines of `batch` wait here (cancelled ones aside). */
  hasWaiting(batch: string): boolean {
    for (const b of this.buckets.values()) for (const p of b.m.values()) if (p.m.get(batch)?.some((w) => !w.cancelled)) return true;
    return false;
  }

  /** Waiters of capped batches (whether or not they could be granted now). */
  cappedWaiting(): number {
    let c = 0;
    for (const b of this.buckets.values()) for (const p of b.m.values()) for (const q of p.m.values()) if (q[0]?.key?.capped) c += q.length;
    return c;
  }

  take(allow: (w: W) => boolean = () => true): W | undefined {
    for (const bucket of this.sorted) {
      const b = this.buckets.get(bucket)!;
      for (const [project, p] of b.m) {
        for (const [batch, q] of p.m) {
          while (q.length && q[0]!.cancelled) {
            q.shift();
            this.n--;
          }
          const w = q[0];
          if (!w || !allow(w)) continue;
          q.shift();
          this.n--;
          // This batch, and its project, go to the back of their turns.
          p.rotate(batch);
          b.rotate(project);
          this.prune(w.key ?? NO_KEY);
          return w;
        }
      }
    }
    // Only cancelled or held-back waiters: drop what is empty.
    for (const b of [...this.buckets.values()]) for (const p of [...b.m.values()]) for (const [batch, q] of [...p.m]) if (q.length === 0) p.m.delete(batch);
    this.pruneAll();
    return undefined;
  }

  private prune(k: BatchKey): void {
    const b = this.buckets.get(k.bucket);
    const p = b?.m.get(k.project);
    if (!b || !p) return;
    if (p.m.get(k.batch)?.length === 0) p.m.delete(k.batch);
    if (p.m.size === 0) b.m.delete(k.project);
    if (b.m.size === 0) {
      this.buckets.delete(k.bucket);
      this.sorted = this.sorted.filter((x) => x !== k.bucket);
    }
  }

  private pruneAll(): void {
    for (const [bucket, b] of [...this.buckets]) {
      for (const [project, p] of [...b.m]) if (p.m.size === 0) b.m.delete(project);
      if (b.m.size === 0) this.buckets.delete(bucket);
    }
    this.sorted = [...this.buckets.keys()].sort((x, y) => x - y);
  }
}

/**
 * Shard claims in the same order (db/claims.ts): among candidate batches,
 * the earliest deadline hour, then the project with fewest shards running
 * (cluster-wide, from the rows: its turn), then the batch with fewest
 * running, then the oldest. Returns the index of the next one to serve.
 */
export function nextCandidate(c: readonly { bucket: number; project: string; running: number; seq: number }[], runningByProject: Map<string, number>): number {
  let best = -1;
  for (let i = 0; i < c.length; i++) {
    if (best === -1) {
      best = i;
      continue;
    }
    const x = c[i]!;
    const y = c[best]!;
    const d = x.bucket - y.bucket || (runningByProject.get(x.project) ?? 0) - (runningByProject.get(y.project) ?? 0) || x.running - y.running || x.seq - y.seq;
    if (d < 0) best = i;
  }
  return best;
}

// ── the order reaching Workers mid-shard ──────────────────────────────────
//
// Claims follow the order only when a Worker comes free, and a shard runs
// for minutes (4 MB ≈ 14k lines, at an engine's pace): a batch ahead in the
// order that arrives while every Worker runs a shard of one behind it would
// wait for one of those to end. So a shard that has run a while yields its
// Worker (it pauses as at a shutdown: its in-flight lines finish, its part
// files keep what is done, it goes back to pending) when a batch ahead of
// its own has shards waiting; the claim that follows gives the Worker to
// that batch, since it is the one ahead (nextCandidate).
//
// "Ahead" is nextCandidate's order with a margin: an earlier deadline hour;
// or, in the same hour, a project holding at least two shards fewer than
// the yielding shard's project (or, in that project, a batch holding two
// fewer). With a margin of one, two projects on an odd number of Workers
// would hand a Worker back and forth for ever; with two, every yield makes
// the running counts strictly more even (or moves a Worker to an earlier
// hour), so yields stop. The cost is that one project may hold one Worker
// more than another; on a single Worker, projects of one hour take turns
// by shards, not within one. A shard yields only after it has run
// `minRunMs`, which bounds each Worker to one yield per that time.

/** A batch with running or pending shards (cluster-wide counts, from the rows). */
export interface YieldBatch {
  id: string;
  project: string;
  /** bucketOf(expires_at). */
  bucket: number;
  running: number;
  pending: number;
  seq: number;
}

/** A shard running on this node, and for how long it has run here. */
export interface LiveShardRef {
  batchId: string;
  idx: number;
  ranMs: number;
}

/** The shards running here that should yield their Worker to batches ahead of theirs (see above). */
export function yieldsFor(batches: readonly YieldBatch[], live: readonly LiveShardRef[], minRunMs: number): { batchId: string; idx: number }[] {
  const byId = new Map(batches.map((b) => [b.id, { ...b }]));
  const byProject = new Map<string, number>();
  for (const b of byId.values()) byProject.set(b.project, (byProject.get(b.project) ?? 0) + b.running);
  const proj = (p: string) => byProject.get(p) ?? 0;
  const behind = (x: YieldBatch, c: YieldBatch) =>
    x.id !== c.id && (x.bucket > c.bucket || (x.bucket === c.bucket && (x.project !== c.project ? proj(x.project) > proj(c.project) + 1 : x.running > c.running + 1)));
  const furtherBehind = (s: LiveShardRef, t: LiveShardRef) => {
    const x = byId.get(s.batchId)!;
    const y = byId.get(t.batchId)!;
    return x.bucket - y.bucket || proj(x.project) - proj(y.project) || x.running - y.running || s.ranMs - t.ranMs;
  };
  let movable = live.filter((s) => s.ranMs >= minRunMs && byId.has(s.batchId));
  const out: { batchId: string; idx: number }[] = [];
  for (;;) {
    // Waiting batches in claim order (deadline hour, project's running, batch's running, age).
    const waiting = [...byId.values()]
      .filter((b) => b.pending > 0)
      .sort((x, y) => x.bucket - y.bucket || proj(x.project) - proj(y.project) || x.running - y.running || x.seq - y.seq);
    let moved = false;
    for (const c of waiting) {
      // The shard furthest behind: latest hour, then the fullest project, then the fullest batch, then the one that ran longest.
      let best: LiveShardRef | null = null;
      for (const s of movable) if (behind(byId.get(s.batchId)!, c) && (!best || furtherBehind(s, best) > 0)) best = s;
      if (!best) continue;
      const x = byId.get(best.batchId)!;
      out.push({ batchId: best.batchId, idx: best.idx });
      movable = movable.filter((s) => s !== best);
      x.running--;
      x.pending++;
      byProject.set(x.project, proj(x.project) - 1);
      c.running++;
      c.pending--;
      byProject.set(c.project, proj(c.project) + 1);
      moved = true;
      break;
    }
    if (!moved) return out;
  }
}

// The off-peak calendar lives in ./peakHours.ts; re-exported for those who import it from here.
export { PeakCalendar, peakNow, type PeakWindow } from "./peakHours";

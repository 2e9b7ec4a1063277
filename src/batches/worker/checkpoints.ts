// Checkpoints of a running shard's part files in the bucket (docs/CONTRACT.md §14): on
// a cluster, the node that runs a shard may die, and its local part files
// die with it. So every CHECKPOINT_MS the Worker uploads what each part file
// gained since the last checkpoint as one object, a segment:
//
//   <part key>.ckpt/<claim>-<start>-<end>      (numbers zero-padded)
//
// where <part key> is the part's own object (<file>.parts/<shard>), <claim>
// the run's number among the shard's claims (batch_shards.claims) and
// [start, end) the segment's byte range in the part file (whole lines: the
// part writer only writes whole lines). Whoever runs the shard next
// rebuilds the part file from the segments before it recovers which lines
// are done, so a node's death costs at most the lines finished since its
// last checkpoint (≈1 s of work) plus those in flight; a pause (SIGTERM)
// checkpoints everything first and costs none. When the shard ends, its
// whole part goes up as the part object and the segments are removed.
//
// Which segments count: runs are ordered by claim. A run restores the chain
// it finds and then writes segments that start where that chain ended; so
// walking the segments by (claim, start), a segment cuts the chain at its
// start and continues it. Segments a stalled earlier run (one whose lease
// was lost) wrote past that point are cut away by the next run's first
// segment; if the next run wrote none, they are the lines that stalled run
// really finished, still a prefix of nothing else, and kept.
//
// Every call to the bucket is retried where it fails (src/storage/bucket.ts).
// Removing the segments (clear) goes backwards, from the last segment in
// that order to the first, and only this run's and earlier runs' segments:
// cut short, it leaves a first part of the list, whose chain is one that
// existed (never a chain with a hole that a later segment would be spliced
// onto), and it never removes what a later run (one that took the shard
// over) wrote.
import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { bucketOf } from "../../storage/bucket";
import type { S3Locator } from "../../storage/locator";

export const CHECKPOINT_MS = 1000;
const PAD = 12;

interface Segment {
  key: string;
  claim: number;
  start: number;
  end: number;
}

const segmentKey = (part: S3Locator, claim: number, start: number, end: number) =>
  `${part.key}.ckpt/${String(claim).padStart(8, "0")}-${String(start).padStart(PAD, "0")}-${String(end).padStart(PAD, "0")}`;

export async function listSegments(part: S3Locator): Promise<Segment[]> {
  const prefix = `${part.key}.ckpt/`;
  const out: Segment[] = [];
  for (const c of await bucketOf(part.s3).keys(prefix)) {
    const m = /(\d+)-(\d+)-(\d+)$/.exec(c.key.slice(prefix.length));
    if (m) out.push({ key: c.key, claim: Number(m[1]), start: Number(m[2]), end: Number(m[3]) });
  }
  return out;
}

/** The segments that make up the part file, in order (see the rule above). */
export function chainOf(segments: Segment[]): Segment[] {
  const chain: Segment[] = [];
  for (const s of [...segments].sort((a, b) => a.claim - b.claim || a.start - b.start)) {
    while (chain.length > 0 && chain[chain.length - 1]!.start >= s.start) chain.pop();
    const end = chain.length > 0 ? chain[chain.length - 1]!.end : 0;
    // Not where the chain ends (a gap, or inside a segment): not a continuation.
    if (s.start !== end || s.end <= s.start) continue;
    chain.push(s);
  }
  return chain;
}

/** One part file's checkpoints: restore before the run, upload while it runs, clear after its end. */
export class PartCheckpoints {
  /** Bytes of the part file that are in the bucket. */
  private uploaded = 0;
  private running: Promise<void> | null = null;

  constructor(
    private readonly part: S3Locator,
    private readonly path: string,
    private readonly claim: number,
  ) {}

  /**
   * Makes the local part file agree with the bucket's checkpoints: the
   * chain of segments, or nothing if there is none. A local file from an
   * earlier run on this node that begins with the whole chain is kept as it
   * is (its lines past the chain are that run's, finished after its last
   * checkpoint: real results, and no other run continued the chain); one
   * that differs is cut where it differs and the chain written from there.
   * Returns the part file's size.
   */
  async restore(): Promise<number> {
    const chain = chainOf(await listSegments(this.part));
    const bucket = bucketOf(this.part.s3);
    const local = Bun.file(this.path);
    let matching = (await local.exists()) && local.size >= (chain[chain.length - 1]?.end ?? 0);
    const fd = openSync(this.path, matching ? "r+" : "w");
    try {
      for (const s of chain) {
        const bytes = await bucket.bytes(s.key);
        if (bytes.length !== s.end - s.start) throw new Error(`checkpoint ${s.key} holds ${bytes.length} bytes, not ${s.end - s.start}`);
        if (matching) {
          const mine = new Uint8Array(await local.slice(s.start, s.end).arrayBuffer());
          if (Buffer.compare(mine, bytes) === 0) continue;
          matching = false;
          ftruncateSync(fd, s.start);
        }
        for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off, s.start + off);
      }
      this.uploaded = chain[chain.length - 1]?.end ?? 0;
      if (!matching) ftruncateSync(fd, this.uploaded);
      return fstatSync(fd).size;
    } finally {
      closeSync(fd);
    }
  }

  /** Uploads what the part file gained up to `size` (whole lines), unless an upload is still running. */
  tick(size: number): void {
    if (this.running || size <= this.uploaded) return;
    this.running = this.upload(size).finally(() => (this.running = null));
  }

  /** Everything up to `size` in the bucket, or throws (waits for a running upload first). */
  async flush(size: number): Promise<void> {
    while (this.running) await this.running;
    if (size > this.uploaded) await this.upload(size);
    if (size > this.uploaded) throw this.lastError ?? new Error("checkpoint upload failed");
  }

  private lastError: unknown = null;

  private async upload(size: number): Promise<void> {
    const start = this.uploaded;
    try {
      await bucketOf(this.part.s3).put(segmentKey(this.part, this.claim, start, size), Bun.file(this.path).slice(start, size));
      this.uploaded = size;
    } catch (e) {
      // Tried again at the next tick; flush() reports it.
      this.lastError = e;
    }
  }

  /**
   * After the whole part is the part object: the segments are not needed
   * any more. Those of this run and earlier ones go, last first (see the
   * top of this file); safe to run again.
   */
  async clear(): Promise<void> {
    while (this.running) await this.running;
    const bucket = bucketOf(this.part.s3);
    const mine = (await listSegments(this.part)).filter((s) => s.claim <= this.claim);
    mine.sort((a, b) => b.claim - a.claim || b.start - a.start || b.end - a.end);
    for (const s of mine) await bucket.delete(s.key);
  }
}

// Repeated custom_ids in an upload, by 64-bit fingerprint (HashSet64): a
// fingerprint seen before makes the line a *suspect*, confirmed exactly
// afterwards against the stored file (./duplicates.ts), so a hash collision
// can never reject a good file.
//
// During an upload this runs in its own Worker, beside the one that scans
// the lines (see validatorClient.ts): the scanner sends it each block's ids
// as an IdBatch. Hashing a million ids into a 16 MB table is ≈25% of the
// single-thread validation time, mostly cache misses.
import { HashSet64 } from "./hashSet64";

/** Stop collecting suspects after this many; real duplicates are confirmed among them. */
export const MAX_SUSPECTS = 64;

export interface Suspect {
  line: number;
  customId: string;
}

export interface DuplicateReport {
  suspects: Suspect[];
  /** The line where MAX_SUSPECTS was reached (checking stopped there), or null. */
  tooManyAt: number | null;
}

/** Receives every request's custom_id, as UTF-8 bytes `b[start, end)`, in line order. */
export interface IdSink {
  add(line: number, b: Uint8Array, start: number, end: number): void;
}

export class DuplicateFinder implements IdSink {
  private readonly set = new HashSet64(1 << 16);
  private readonly decoder = new TextDecoder();
  readonly suspects: Suspect[] = [];
  tooManyAt: number | null = null;

  add(line: number, b: Uint8Array, start: number, end: number): void {
    if (this.tooManyAt !== null || this.set.addBytes(b, start, end)) return;
    this.suspects.push({ line, customId: this.decoder.decode(b.subarray(start, end)) });
    if (this.suspects.length >= MAX_SUSPECTS) this.tooManyAt = line;
  }

  addBatch(batch: IdBatch): void {
    let start = 0;
    for (let k = 0; k < batch.count; k++) {
      const end = batch.ends[k]!;
      this.add(batch.lines[k]!, batch.bytes, start, end);
      start = end;
    }
  }

  report(): DuplicateReport {
    return { suspects: this.suspects, tooManyAt: this.tooManyAt };
  }
}

/** A block's ids: id k is `bytes[ends[k-1], ends[k])` (from 0 for k = 0), on line `lines[k]`. */
export interface IdBatch {
  count: number;
  lines: Int32Array<ArrayBuffer>;
  ends: Int32Array<ArrayBuffer>;
  bytes: Uint8Array<ArrayBuffer>;
}

/** Gathers ids into an IdBatch to send to the DuplicateFinder's Worker (transferring its buffers). */
export class IdBatcher implements IdSink {
  private count = 0;
  private used = 0;
  private lines = new Int32Array(4096);
  private ends = new Int32Array(4096);
  private bytes = new Uint8Array(64 * 1024);

  add(line: number, b: Uint8Array, start: number, end: number): void {
    const n = end - start;
    if (this.count === this.lines.length) {
      this.lines = grown(this.lines, this.count * 2);
      this.ends = grown(this.ends, this.count * 2);
    }
    if (this.used + n > this.bytes.length) {
      const more = new Uint8Array(Math.max(this.bytes.length * 2, this.used + n));
      more.set(this.bytes.subarray(0, this.used));
      this.bytes = more;
    }
    // Ids are short: a byte loop beats set(subarray()) and its allocation.
    const out = this.bytes;
    let o = this.used;
    for (let i = start; i < end; i++) out[o++] = b[i]!;
    this.used = o;
    this.lines[this.count] = line;
    this.ends[this.count++] = o;
  }

  /** The ids gathered since the last take (null if none); the batcher starts afresh. */
  take(): IdBatch | null {
    if (this.count === 0) return null;
    const batch: IdBatch = { count: this.count, lines: this.lines, ends: this.ends, bytes: this.bytes };
    this.count = 0;
    this.used = 0;
    this.lines = new Int32Array(this.lines.length);
    this.ends = new Int32Array(this.ends.length);
    this.bytes = new Uint8Array(this.bytes.length);
    return batch;
  }
}

function grown(a: Int32Array<ArrayBuffer>, length: number): Int32Array<ArrayBuffer> {
  const b = new Int32Array(length);
  b.set(a);
  return b;
}

/** The buffers of a batch, to transfer with postMessage. */
export const transferablesOf = (batch: IdBatch): ArrayBuffer[] => [batch.lines.buffer, batch.ends.buffer, batch.bytes.buffer];

// Repeated custom_ids in an upload, by 64-bit fingerprint: a fingerprint
// seen before makes the line a *suspect*, confirmed exactly afterwards
// against the stored file (./duplicates.ts), so a hash collision can never
// reject a good file.
//
// During an upload this runs in its own Worker, beside the one that scans
// the lines (see validatorClient.ts): the scanner sends it each block's ids
// as an IdBatch.
//
// Memory is bounded. Fingerprints go into a HashSet64 (8 B a slot, at most
// 0.7 full) that doubles up to `memoryBytes`; at 10,000,000 ids it would
// need 128 MB (and 192 MB while doubling), so past that bound the
// fingerprints *spill*: the set is written out, and every later id is
// appended, as (fingerprint, line), to one of 64 partition files chosen by
// its fingerprint. After the last id each partition is read back in line
// order into a small set of its own (≈156K entries, 2 MB at 10M ids): a
// fingerprint seen before is a suspect, exactly as in memory. Entries from
// the set come first in their partition with line 0, so a suspect is always
// a later line. Only the first MAX_SUSPECTS by line are kept, the same ones
// the in-memory pass would have found.
import { appendFileSync, closeSync, mkdirSync, openSync, readSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { fingerprint, fp, HashSet64 } from "./hashSet64";

/** Stop collecting suspects after this many; real duplicates are confirmed among them. */
export const MAX_SUSPECTS = 64;

/** A line whose custom_id's fingerprint (hi, lo) appeared on an earlier line. */
export interface Suspect {
  line: number;
  hi: number;
  lo: number;
}

export interface DuplicateReport {
  suspects: Suspect[];
  /** The line where MAX_SUSPECTS was reached (checking stopped there), or null. */
  tooManyAt: number | null;
  /** Fingerprints written to spill files (0: the check stayed in memory). */
  spilled: number;
}

/** Receives every request's custom_id, as UTF-8 bytes `b[start, end)`, in line order. */
export interface IdSink {
  add(line: number, b: Uint8Array, start: number, end: number): void;
}

export interface FinderOptions {
  /** Bytes the in-memory set may take; past them fingerprints spill to disk (if spillPath is set). */
  memoryBytes?: number;
  /** Prefix of the spill files (`<prefix>.<partition>`), in a directory on disk (not tmpfs); null: never spill. */
  spillPath?: string | null;
}

/**
 * The default memoryBytes (the server's default is config.ts's, the same):
 * up to 367K ids stay in memory, and a spill is checked in one pass per
 * partition up to ≈23M ids. Spilling is not slower than a big set, whose
 * every insert is a cache miss (bench/finder-bench.ts, best of 2–3):
 * 10M ids 2.25 s with this bound (peak RSS 83 MB), 2.30 s with 16 MiB,
 * 5.35 s all in memory (302 MB); 1M ids 0.43 s against 0.68 s.
 */
export const DEFAULT_DUPLICATE_CHECK_BYTES = 4 << 20;
/** The set's smallest allowed bound (1024 slots): smaller settings are for tests that force the spill. */
const MIN_SLOTS = 1 << 10;

export class DuplicateFinder implements IdSink {
  private set: HashSet64 | null;
  /** Ids kept in the set; the one after them starts the spill. */
  private readonly maxInMemory: number;
  private readonly spillPath: string | null;
  private spill: Spill | null = null;
  readonly suspects: Suspect[] = [];
  tooManyAt: number | null = null;

  constructor(opts: FinderOptions = {}) {
    this.spillPath = opts.spillPath ?? null;
    let maxSlots = MIN_SLOTS;
    while (maxSlots * 2 * 8 <= (opts.memoryBytes ?? DEFAULT_DUPLICATE_CHECK_BYTES)) maxSlots *= 2;
    // The set doubles when an add would fill it past 0.7: this many never make it outgrow maxSlots.
    this.maxInMemory = this.spillPath ? Math.floor(maxSlots * 0.7) : Infinity;
    this.set = new HashSet64(Math.min(1 << 16, maxSlots));
  }

  add(line: number, b: Uint8Array, start: number, end: number): void {
    if (this.tooManyAt !== null) return;
    fingerprint(b, start, end);
    if (this.spill) return this.spill.add(fp.hi, fp.lo, line);
    const set = this.set!;
    if (set.size >= this.maxInMemory) {
      this.startSpill();
      return this.spill!.add(fp.hi, fp.lo, line);
    }
    if (!set.add(fp.hi, fp.lo)) this.suspect(line, fp.hi, fp.lo);
  }

  private suspect(line: number, hi: number, lo: number): void {
    this.suspects.push({ line, hi, lo });
    if (this.suspects.length >= MAX_SUSPECTS) this.tooManyAt = line;
  }

  private startSpill(): void {
    mkdirSync(dirname(this.spillPath!), { recursive: true });
    const spill = (this.spill = new Spill(this.spillPath!, this.maxInMemory));
    // Line 0: before every line that follows, so never itself a suspect.
    this.set!.forEach((hi, lo) => spill.add(hi, lo, 0));
    this.set = null;
  }

  addBatch(batch: IdBatch): void {
    let start = 0;
    for (let k = 0; k < batch.count; k++) {
      const end = batch.ends[k]!;
      this.add(batch.lines[k]!, batch.bytes, start, end);
      start = end;
    }
  }

  /** The suspects; with a spill, checks (and removes) its files first. */
  report(): DuplicateReport {
    const spill = this.spill;
    if (!spill) return { suspects: this.suspects, tooManyAt: this.tooManyAt, spilled: 0 };
    this.spill = null;
    try {
      // Every suspect found in memory comes before every line that spilled.
      for (const s of spill.check()) {
        if (this.tooManyAt !== null) break;
        this.suspect(s.line, s.hi, s.lo);
      }
    } finally {
      spill.remove();
    }
    return { suspects: this.suspects, tooManyAt: this.tooManyAt, spilled: spill.entries };
  }

  /** Removes spill files (an abandoned check). */
  discard(): void {
    this.spill?.remove();
    this.spill = null;
  }
}

/** Partitions by 6 bits of a keyed mix of the fingerprint: at 10M ids, ≈156K entries (1.9 MB) each. */
const PARTITION_BITS = 6;
export const SPILL_PARTITIONS = 1 << PARTITION_BITS;
/** Entries (hi, lo, line: 12 B) buffered per partition before an append: ≈16 KB, 1 MB for all. */
const BUFFER_ENTRIES = 1365;
/** Entries read back per readSync. */
const READ_ENTRIES = 21840;

/** The spill files of one check: `${path}.${p}` for partition p. */
class Spill {
  private readonly bufs: Int32Array[] = [];
  private readonly buffered = new Int32Array(SPILL_PARTITIONS);
  private readonly written = new Float64Array(SPILL_PARTITIONS);
  private readonly created = new Uint8Array(SPILL_PARTITIONS);
  /** Random per check, so that no input can be made to crowd one partition. */
  private readonly key = (Math.random() * 0x100000000) | 0;
  entries = 0;

  constructor(
    private readonly path: string,
    /** Entries one partition check may hold in memory; a larger partition is checked in several passes. */
    private readonly maxPerPass: number,
  ) {
    for (let p = 0; p < SPILL_PARTITIONS; p++) this.bufs.push(new Int32Array(BUFFER_ENTRIES * 3));
  }

  /** 32 well-mixed bits of (hi, lo) under this check's key; the top bits pick the partition, the next ones the pass. */
  private mix(hi: number, lo: number): number {
    let h = Math.imul(hi ^ this.key, 0x9e3779b1) ^ lo;
    h = Math.imul(h ^ (h >>> 15), 0x85ebca6b);
    return (h ^ (h >>> 13)) >>> 0;
  }

  add(hi: number, lo: number, line: number): void {
    // As HashSet64 stores it (0,0 marks its empty slots): one fingerprint, one partition.
    if (hi === 0 && lo === 0) lo = 1;
    const p = this.mix(hi, lo) >>> (32 - PARTITION_BITS);
    const buf = this.bufs[p]!;
    const k = this.buffered[p]! * 3;
    buf[k] = hi;
    buf[k + 1] = lo;
    buf[k + 2] = line;
    this.entries++;
    if (++this.buffered[p]! === BUFFER_ENTRIES) this.flush(p);
  }

  /** Appends a partition's buffer to its file (open, write, close: no descriptor stays open if the Worker is terminated). */
  private flush(p: number): void {
    const n = this.buffered[p]!;
    if (n === 0) return;
    appendFileSync(`${this.path}.${p}`, new Uint8Array(this.bufs[p]!.buffer, 0, n * 12));
    this.created[p] = 1;
    this.written[p]! += n;
    this.buffered[p] = 0;
  }

  /** Each partition's first MAX_SUSPECTS suspects, all of them sorted by line. */
  check(): Suspect[] {
    for (let p = 0; p < SPILL_PARTITIONS; p++) this.flush(p);
    const found: Suspect[] = [];
    const chunk = new Int32Array(READ_ENTRIES * 3);
    const bytes = new Uint8Array(chunk.buffer);
    for (let p = 0; p < SPILL_PARTITIONS; p++) {
      const n = this.written[p]!;
      if (n === 0) continue;
      // Balanced partitions take one pass; only a partition far over its share takes more.
      let passBits = 0;
      while (n / (1 << passBits) > this.maxPerPass && passBits < 32 - PARTITION_BITS - 1) passBits++;
      const passes = 1 << passBits;
      for (let pass = 0; pass < passes; pass++) {
        const set = new HashSet64(Math.ceil(Math.min(n / passes, this.maxPerPass) / 0.7) + 1);
        let suspects = 0;
        const fd = openSync(`${this.path}.${p}`, "r");
        try {
          let pos = 0;
          scan: for (;;) {
            // Regular files read in full, but a short read must not split an entry.
            let got = 0;
            while (got < bytes.length) {
              const r = readSync(fd, bytes, got, bytes.length - got, pos + got);
              if (r === 0) break;
              got += r;
            }
            pos += got;
            const entries = Math.floor(got / 12);
            for (let e = 0; e < entries; e++) {
              const hi = chunk[3 * e]!;
              const lo = chunk[3 * e + 1]!;
              if (passes > 1 && ((this.mix(hi, lo) >>> (32 - PARTITION_BITS - passBits)) & (passes - 1)) !== pass) continue;
              if (set.add(hi, lo)) continue;
              found.push({ line: chunk[3 * e + 2]!, hi, lo });
              // Entries are in line order: this partition's later suspects come after these.
              if (++suspects === MAX_SUSPECTS) break scan;
            }
            if (got < bytes.length) break;
          }
        } finally {
          closeSync(fd);
        }
      }
    }
    return found.sort((a, b) => a.line - b.line);
  }

  remove(): void {
    for (let p = 0; p < SPILL_PARTITIONS; p++) if (this.created[p]) rmSync(`${this.path}.${p}`, { force: true });
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

  /** The ids gathered since the last take (null if none); the batcher starts afresh, on a recycled batch's buffers if one came back. */
  take(): IdBatch | null {
    if (this.count === 0) return null;
    const batch: IdBatch = { count: this.count, lines: this.lines, ends: this.ends, bytes: this.bytes };
    this.count = 0;
    this.used = 0;
    const again = this.free.pop();
    if (again && again.lines.length >= this.lines.length && again.bytes.length >= this.bytes.length) {
      this.lines = again.lines;
      this.ends = again.ends;
      this.bytes = again.bytes;
    } else {
      this.lines = new Int32Array(this.lines.length);
      this.ends = new Int32Array(this.ends.length);
      this.bytes = new Uint8Array(this.bytes.length);
    }
    return batch;
  }

  /**
   * A batch the finder is done with, sent back: its buffers are filled again
   * instead of leaving ≈100 KB of garbage per 1 MB block for the GC (at 10M
   * lines, 270 MB of it in the finder's Worker).
   */
  recycle(batch: IdBatch): void {
    if (this.free.length < 4) this.free.push(batch);
  }
  private readonly free: IdBatch[] = [];
}

function grown(a: Int32Array<ArrayBuffer>, length: number): Int32Array<ArrayBuffer> {
  const b = new Int32Array(length);
  b.set(a);
  return b;
}

/** The buffers of a batch, to transfer with postMessage. */
export const transferablesOf = (batch: IdBatch): ArrayBuffer[] => [batch.lines.buffer, batch.ends.buffer, batch.bytes.buffer];

// Puts an upload checked by several scanner Workers back together (docs/CONTRACT.md
// §20: validation uses the cores it is given). The file is cut into blocks
// at line ends (./lineBlocks.ts); each scanner checks whole blocks with
// lines numbered from 1 (BatchFileValidator.startBlock) and sends what it
// found here, in whatever order the scanners finish. Taken in the file's
// order, each block's lines are moved by the lines of the blocks before it,
// so everything that needs the whole file is decided exactly as one
// validator reading it from the start would: the first bad line, the
// request limit, the custom_ids' fingerprints in line order (a suspect is
// always the later line), and "no requests".
import { renumbered, withDuplicates, type LineError, type ValidationResult } from "./batchFileValidator";
import type { DuplicateFinder, IdBatch } from "./duplicateFinder";

/** What a scanner sends for one block (its ids' lines numbered within it). */
export interface ScannedBlock {
  /** The block's place in the file: 0, 1, 2, … */
  seq: number;
  lines: number;
  requests: number;
  error: LineError | null;
  /** The valid requests' custom_ids, in line order (null: none). */
  ids: IdBatch | null;
}

export class BlockSequencer {
  /** Blocks that came before their turn. */
  private readonly early = new Map<number, ScannedBlock>();
  /** The next block in the file's order. */
  private next = 0;
  private linesBefore = 0;
  private requests = 0;
  private error: LineError | null = null;
  /** Set once the file's verdict cannot change: a bad line, the request limit passed, or the finder gave up on too many suspects. */
  private stopped = false;
  private blocks: number | null = null;

  constructor(
    private readonly maxRequests: number,
    private readonly finder: DuplicateFinder,
  ) {}

  /** Blocks taken in order so far. */
  get sequenced(): number {
    return this.next;
  }

  /** The file is bad (a line, the request limit, or too many suspect duplicates): nothing read after this changes the answer. */
  get failed(): boolean {
    return this.stopped;
  }

  /** Every block up to the count given to end() has been taken. */
  get done(): boolean {
    return this.blocks !== null && this.next >= this.blocks;
  }

  /** Takes a block in any order; returns the blocks taken in order by this call (their id batches are free again). */
  add(block: ScannedBlock): ScannedBlock[] {
    if (block.seq < this.next || this.early.has(block.seq)) throw new Error(`block ${block.seq} came twice`);
    this.early.set(block.seq, block);
    const taken: ScannedBlock[] = [];
    for (let b = this.early.get(this.next); b; b = this.early.get(this.next)) {
      this.early.delete(this.next);
      this.next++;
      if (!this.stopped) this.take(b);
      taken.push(b);
    }
    return taken;
  }

  /** No blocks after the first `blocks`. */
  end(blocks: number): void {
    this.blocks = blocks;
  }

  private take(b: ScannedBlock): void {
    const offset = this.linesBefore;
    const ids = b.ids;
    if (ids) {
      let start = 0;
      for (let k = 0; k < ids.count; k++) {
        const line = offset + ids.lines[k]!;
        if (++this.requests > this.maxRequests) {
          this.error = { line, code: "invalid_file", param: null, message: `line ${line}: the file has more than ${this.maxRequests} requests` };
          this.stopped = true;
          return;
        }
        const end = ids.ends[k]!;
        this.finder.add(line, ids.bytes, start, end);
        start = end;
        // Its report names the line; nothing later can come before it.
        if (this.finder.tooManyAt !== null) {
          this.stopped = true;
          return;
        }
      }
    }
    // The block's ids all come before its first bad line.
    if (b.error) {
      this.error = renumbered(b.error, offset);
      this.stopped = true;
      return;
    }
    this.linesBefore += b.lines;
  }

  /** The file's result, once done. */
  result(): ValidationResult {
    if (!this.done) throw new Error(`the result asked for after ${this.next} of ${this.blocks ?? "?"} blocks`);
    let error = this.error;
    if (!error && !this.stopped && this.requests === 0)
      error = { line: Math.max(this.linesBefore, 1), code: "invalid_file", param: null, message: "the file contains no requests" };
    return withDuplicates({ requests: this.requests, lines: this.linesBefore, error, suspects: [] }, this.finder.report());
  }
}

// An upload's bytes gathered into blocks that end at a line's end, so that
// several scanner Workers can each check whole lines (./sequencer.ts puts
// their findings back in the file's order). What the HTTP thread does per
// block: one copy of the bytes (they are transferred to a Worker, which
// the request's own buffers cannot be) and a search back from the block's
// end for its last newline, which passes only the bytes of the last line;
// nothing else looks at the content here.
import { MAX_LINE_BYTES } from "./batchFileValidator";

/**
 * A block with no newline in it is grown up to this size before it is sent
 * as it is: a line longer than MAX_LINE_BYTES, its CR and its LF cannot fit,
 * and its scanner refuses it as too long, as reading the file whole would.
 */
export const MAX_BLOCK = MAX_LINE_BYTES + 2;

export class LineBlocks {
  private block: Uint8Array<ArrayBuffer>;
  private used = 0;

  /**
   * `emit` gets each block (bytes [0, length) of its buffer, which it may
   * transfer); `fresh` gives a buffer of `size` bytes to fill next (a
   * recycled one, or a new one).
   */
  constructor(
    private readonly size: number,
    private readonly emit: (block: Uint8Array<ArrayBuffer>, length: number) => void,
    private readonly fresh: () => Uint8Array<ArrayBuffer> = () => new Uint8Array(size),
  ) {
    this.block = fresh();
  }

  /** Bytes held for the next block. */
  get pending(): number {
    return this.used;
  }

  /** Copies `chunk` (it is not kept). */
  write(chunk: Uint8Array): void {
    let off = 0;
    while (off < chunk.length) {
      const n = Math.min(this.block.length - this.used, chunk.length - off);
      this.block.set(chunk.subarray(off, off + n), this.used);
      this.used += n;
      off += n;
      if (this.used === this.block.length) this.cut();
    }
  }

  /** Sends what is left: the file's last line, which may have no newline. */
  end(): void {
    if (this.used > 0) this.send(this.used, 0);
  }

  /** A full block: sent up to its last newline, the rest starts the next one. */
  private cut(): void {
    const nl = this.block.lastIndexOf(10, this.used - 1);
    if (nl !== -1) return this.send(nl + 1, this.used - nl - 1);
    // One line fills the block: a bigger one for it, up to the longest a line may be.
    if (this.block.length < MAX_BLOCK) {
      const bigger = new Uint8Array(Math.min(this.block.length * 2, MAX_BLOCK));
      bigger.set(this.block.subarray(0, this.used));
      this.block = bigger;
      return;
    }
    this.send(this.used, 0);
  }

  private send(length: number, rest: number): void {
    const full = this.block;
    const next = this.fresh();
    // The start of the next block's first line (at most a line: it had no newline).
    if (rest > 0) {
      const tail = full.subarray(length, length + rest);
      // A line longer than a block goes on in a block that can hold it.
      const room = rest >= next.length ? new Uint8Array(Math.min(Math.max(next.length, rest) * 2, MAX_BLOCK)) : next;
      room.set(tail);
      this.block = room;
    } else this.block = next;
    this.used = rest;
    this.emit(full, length);
  }
}

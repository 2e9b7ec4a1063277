// Exact confirmation of duplicate custom_id suspects (see duplicates.ts),
// fed the stored file's bytes in order: push-based, so it can run in a
// Worker that the main thread hands chunks to.
//
// A suspect is a line and its id's fingerprint (the finder may have spilled
// to disk and kept no id text). Lines up to the last suspect's are read the
// way the validator read them (same numbering, BOM, CR): each line's
// custom_id comes from the byte scanner (no decoding) or, when it is not
// sure, from JSON.parse, and is fingerprinted the same way the validator
// did. Only ids whose fingerprint is a suspect's are kept; the first line
// whose id is already kept is the first real duplicate (the first duplicate
// line of a file is always a suspect, so none is missed).
import { fingerprint, fingerprintString, fp, HashSet64 } from "./hashSet64";
import { scanRequestLine, type ScanResult } from "./lineScan";

export interface ConfirmedDuplicate {
  line: number;
  customId: string;
}

export class DuplicateConfirmer {
  private readonly wanted: HashSet64;
  private readonly lastLine: number;
  private readonly seen = new Set<string>();
  private readonly scan: ScanResult = { idStart: 0, idEnd: 0 };
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  private carry: Uint8Array | null = null;
  private lineNo = 0;
  private first = true;
  /** Set once decided: the first real duplicate, or null (none up to the last suspect). */
  result: ConfirmedDuplicate | null = null;
  done: boolean;

  constructor(suspects: readonly { line: number; hi: number; lo: number }[]) {
    this.wanted = new HashSet64(suspects.length * 2 + 2);
    for (const s of suspects) this.wanted.add(s.hi, s.lo);
    this.lastLine = suspects.reduce((m, s) => Math.max(m, s.line), 0);
    this.done = suspects.length === 0;
  }

  /** The next bytes of the file; true once decided (nothing more is needed). */
  push(chunk: Uint8Array): boolean {
    if (this.done) return true;
    let b = chunk;
    let pos = 0;
    if (this.first && b.length > 0) {
      this.first = false;
      if (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) pos = 3;
    }
    if (this.carry) {
      const nl = b.indexOf(10, pos);
      if (nl === -1) {
        this.carry = concat(this.carry, b.subarray(pos));
        return false;
      }
      const line = concat(this.carry, b.subarray(pos, nl));
      this.carry = null;
      if (this.line(line, 0, line.length)) return true;
      pos = nl + 1;
    }
    while (pos < b.length) {
      const nl = b.indexOf(10, pos);
      if (nl === -1) {
        this.carry = b.slice(pos);
        return false;
      }
      if (this.line(b, pos, nl)) return true;
      pos = nl + 1;
    }
    return false;
  }

  /** The end of the file. */
  end(): void {
    if (this.done) return;
    const rest = this.carry;
    this.carry = null;
    if (rest && rest.length > 0 && this.line(rest, 0, rest.length)) return;
    this.done = true;
  }

  /** One line (without its newline); true once decided. */
  private line(b: Uint8Array, start: number, end: number): boolean {
    const n = ++this.lineNo;
    if (n > this.lastLine) return (this.done = true);
    if (end > start && b[end - 1] === 13) end--;
    let id: string | null = null;
    if (scanRequestLine(b, start, end, this.scan)) {
      fingerprint(b, this.scan.idStart, this.scan.idEnd);
      if (!this.wanted.has(fp.hi, fp.lo)) return false;
      id = this.decoder.decode(b.subarray(this.scan.idStart, this.scan.idEnd));
    } else {
      let parsed: unknown;
      try {
        parsed = JSON.parse(this.decoder.decode(b.subarray(start, end)));
      } catch {
        return false;
      }
      const v = (parsed as { custom_id?: unknown } | null)?.custom_id;
      if (typeof v !== "string") return false;
      fingerprintString(v);
      if (!this.wanted.has(fp.hi, fp.lo)) return false;
      id = v;
    }
    if (this.seen.has(id)) {
      this.result = { line: n, customId: id };
      return (this.done = true);
    }
    this.seen.add(id);
    return false;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

// Checks a batch input file line by line while it streams in (docs/CONTRACT.md §4).
//
// Speed: lines are found with a native indexOf on the raw bytes, and each is
// checked by a byte-level scanner (./lineScan.ts) with no decoding and no
// allocation; only a line it is not sure about is decoded and run through
// JSON.parse, which words every error message. Only a line that straddles
// two chunks is copied. Each request's custom_id goes to an IdSink: a
// DuplicateFinder here, or (during an upload) a batcher that sends the ids
// to a DuplicateFinder in another Worker (./duplicateFinder.ts).
import { DuplicateFinder, type DuplicateReport, type IdSink, type Suspect } from "./duplicateFinder";
import { ENDPOINT_LIST, kindOfUrl } from "../endpoints";
import { scanRequestLine, type ScanResult } from "./lineScan";
import { firstInvalidUtf8, invalidJsonMessage } from "./jsonError";

/** A single request line longer than this is rejected (a 10 MB line is not a request). */
export const MAX_LINE_BYTES = 4 * 1024 * 1024;

export interface LineError {
  line: number;
  code: "invalid_file" | "duplicate_custom_id" | "missing_field" | "invalid_value";
  param: string | null;
  message: string;
  /** Set when validation stopped on too many fingerprint hits: not itself a confirmed error. */
  unconfirmed?: boolean;
}

/** What one block of a file cut at line ends (see lineBlocks.ts) holds: its lines numbered from 1. */
export interface BlockSummary {
  /** Lines in the block, blank ones included. */
  lines: number;
  /** Valid requests before its first error (all of them if none). */
  requests: number;
  /** Its first bad line, numbered within the block; the file's line is found by renumbered(). */
  error: LineError | null;
}

export interface ValidationResult {
  requests: number;
  /** Lines seen, blank ones included. */
  lines: number;
  error: LineError | null;
  /** Possible duplicates (line numbers and ids), to be confirmed exactly. */
  suspects: Suspect[];
}

export class BatchFileValidator {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  private readonly encoder = new TextEncoder();
  private readonly scan: ScanResult = { idStart: 0, idEnd: 0 };
  /** The start of a line that began in an earlier chunk, in pieces. */
  private carry: Uint8Array[] = [];
  private carryBytes = 0;
  private lineNo = 0;
  private requests = 0;
  private first = true;
  private error: LineError | null = null;

  /** `ids`: where custom_ids go; by default a DuplicateFinder whose findings finish() reports. */
  constructor(
    private readonly maxRequests: number,
    private readonly ids: IdSink = new DuplicateFinder(),
  ) {}

  get failed(): boolean {
    return this.error !== null;
  }

  /**
   * Starts a block of a file cut at line ends (an upload checked by several
   * Workers at once): lines numbered from 1 again, a BOM skipped only in the
   * file's first block, no error yet. Checked like the whole file, but for
   * what only the whole file can tell (the request limit, "no requests"):
   * BlockSequencer (./sequencer.ts) puts the blocks' summaries together.
   */
  startBlock(first: boolean): void {
    this.carry = [];
    this.carryBytes = 0;
    this.lineNo = 0;
    this.requests = 0;
    this.first = first;
    this.error = null;
  }

  /** Ends a block: a last line without its newline counts (only the file's last block has one). */
  endBlock(): BlockSummary {
    this.lastLine();
    return { lines: this.lineNo, requests: this.requests, error: this.error };
  }

  /** `chunk` is only read during the call: nothing keeps a reference to it afterwards. */
  push(chunk: Uint8Array): void {
    if (this.error) return;
    let pos = 0;
    if (this.first && chunk.length > 0) {
      this.first = false;
      if (chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf) pos = 3;
    }
    if (this.carryBytes > 0) {
      const nl = chunk.indexOf(10, pos);
      if (nl === -1) return this.keep(chunk.subarray(pos));
      // Join only the straddling line.
      const line = this.takeCarry(chunk.subarray(pos, nl));
      this.line(line, 0, line.length);
      pos = nl + 1;
    }
    while (pos < chunk.length && !this.error) {
      const nl = chunk.indexOf(10, pos);
      if (nl === -1) return this.keep(chunk.subarray(pos));
      this.line(chunk, pos, nl);
      pos = nl + 1;
    }
  }

  finish(): ValidationResult {
    this.lastLine();
    if (!this.error && this.requests === 0) this.fail(Math.max(this.lineNo, 1), "invalid_file", null, "the file contains no requests");
    const result: ValidationResult = { requests: this.requests, lines: this.lineNo, error: this.error, suspects: [] };
    return this.ids instanceof DuplicateFinder ? withDuplicates(result, this.ids.report()) : result;
  }

  /** A last line without its newline. */
  private lastLine(): void {
    if (!this.error && this.carryBytes > 0) {
      const rest = this.takeCarry();
      this.line(rest, 0, rest.length);
    }
  }

  /** The carried start of a line and then `tail`, as one array; the carry is emptied. */
  private takeCarry(tail?: Uint8Array): Uint8Array {
    const line = new Uint8Array(this.carryBytes + (tail?.length ?? 0));
    let off = 0;
    for (const piece of this.carry) {
      line.set(piece, off);
      off += piece.length;
    }
    if (tail) line.set(tail, off);
    this.carry = [];
    this.carryBytes = 0;
    return line;
  }

  private keep(rest: Uint8Array): void {
    if (this.carryBytes + rest.length > MAX_LINE_BYTES) return this.fail(this.lineNo + 1, "invalid_file", null, `line ${this.lineNo + 1} is longer than ${MAX_LINE_BYTES} bytes`);
    this.carry.push(rest.slice());
    this.carryBytes += rest.length;
  }

  private fail(line: number, code: LineError["code"], param: string | null, message: string): void {
    if (!this.error) this.error = { line, code, param, message };
  }

  /** One line: bytes [start, end) of `b`, without its newline. */
  private line(b: Uint8Array, start: number, end: number): void {
    const n = ++this.lineNo;
    if (end > start && b[end - 1] === 13) end--;
    if (end - start > MAX_LINE_BYTES) return this.fail(n, "invalid_file", null, `line ${n} is longer than ${MAX_LINE_BYTES} bytes`);
    if (isBlank(b, start, end)) return;
    if (scanRequestLine(b, start, end, this.scan)) {
      if (this.countRequest(n)) this.ids.add(n, b, this.scan.idStart, this.scan.idEnd);
      return;
    }
    let text: string;
    try {
      text = this.decoder.decode(b.subarray(start, end));
    } catch {
      const at = firstInvalidUtf8(b, start, end);
      return this.fail(n, "invalid_file", null, at < 0 ? `line ${n} is not valid UTF-8` : `line ${n}, column ${at + 1}: not valid UTF-8 (byte 0x${b[start + at]!.toString(16).toUpperCase().padStart(2, "0")})`);
    }
    this.checkLine(n, text);
  }

  /** The exact (slow) path: JSON.parse and field checks with precise messages. */
  private checkLine(n: number, line: string): void {
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      // Where and why (docs/CONTRACT.md §19): the byte column and the reason, worked out only now that the line is refused.
      return this.fail(n, "invalid_file", null, invalidJsonMessage(n, line, e));
    }
    if (typeof value !== "object" || value === null || Array.isArray(value))
      return this.fail(n, "invalid_file", null, `line ${n} is not a JSON object (it is ${Array.isArray(value) ? "an array" : value === null ? "null" : `a ${typeof value}`}; a request is {"custom_id": …, "method": "POST", "url": …, "body": {…}})`);
    const req = value as Record<string, unknown>;
    const id = req.custom_id;
    if (id === undefined || id === null) return this.fail(n, "missing_field", "custom_id", `line ${n}: custom_id is missing`);
    if (typeof id !== "string" || id.length === 0) return this.fail(n, "invalid_value", "custom_id", `line ${n}: custom_id must be a non-empty string`);
    if (req.method !== "POST") return this.fail(n, "invalid_value", "method", `line ${n}: method must be "POST"`);
    if (typeof req.url !== "string" || kindOfUrl(req.url) === undefined)
      return this.fail(n, "invalid_value", "url", `line ${n}: url must be one of ${ENDPOINT_LIST}`);
    const body = req.body;
    if (typeof body !== "object" || body === null || Array.isArray(body)) return this.fail(n, "invalid_value", "body", `line ${n}: body must be a JSON object`);
    const model = (body as Record<string, unknown>).model;
    if (typeof model !== "string" || model.length === 0) return this.fail(n, "missing_field", "body.model", `line ${n}: body.model must be a non-empty string`);
    if (this.countRequest(n)) {
      const bytes = this.encoder.encode(id);
      this.ids.add(n, bytes, 0, bytes.length);
    }
  }

  /** Counts a valid request; false (and the error) past the line limit. */
  private countRequest(n: number): boolean {
    if (++this.requests <= this.maxRequests) return true;
    this.fail(n, "invalid_file", null, `line ${n}: the file has more than ${this.maxRequests} requests`);
    return false;
  }

}

/**
 * A scan's result with a DuplicateFinder's report: its suspects, and, if it
 * stopped at too many suspects before the scan's first error, that as the
 * error (marked unconfirmed: the confirmation pass finds the first real
 * duplicate among the suspects).
 */
export function withDuplicates(result: ValidationResult, dupes: DuplicateReport): ValidationResult {
  let error = result.error;
  const at = dupes.tooManyAt;
  if (at !== null && (!error || at < error.line))
    error = { line: at, code: "duplicate_custom_id", param: "custom_id", message: `line ${at}: too many possible duplicate custom_ids`, unconfirmed: true };
  return { ...result, error, suspects: dupes.suspects };
}

/**
 * A block's error as the file's: its line moved by the `offset` lines of the
 * blocks before it. Every message of a line's error starts with "line N"
 * (test/validation-blocks.test.ts holds each kind to it), so that is the
 * part rewritten.
 */
export function renumbered(error: LineError, offset: number): LineError {
  const local = `line ${error.line}`;
  if (!error.message.startsWith(local)) throw new Error(`a line error whose message does not start with '${local}': ${error.message}`);
  const line = error.line + offset;
  return { ...error, line, message: `line ${line}${error.message.slice(local.length)}` };
}

function isBlank(b: Uint8Array, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = b[i];
    if (c !== 32 && c !== 9 && c !== 13) return false;
  }
  return true;
}

// Checks a batch input file line by line while it streams in (SPEC §4).
//
// Speed: chunks are cut at their last newline and decoded whole (one
// TextDecoder call per ~1 MB, not per line), then split with indexOf. The
// per-line cost is one JSON.parse plus two murmur hashes of the custom_id.
// Duplicate detection keeps 64-bit fingerprints, not strings, so memory does
// not grow with id length; a fingerprint hit is only a *suspect* and is
// confirmed exactly afterwards by rescanning the stored file
// (confirmDuplicates in ./duplicates.ts), so a hash collision can never
// reject a good file.
import { canonicalEndpoint } from "./endpoints";
import { HashSet64, fingerprint } from "./hashSet64";

/** A single request line longer than this is rejected (a 10 MB line is not a request). */
export const MAX_LINE_BYTES = 4 * 1024 * 1024;
/** Stop collecting duplicate suspects after this many; real duplicates are confirmed among them. */
const MAX_SUSPECTS = 64;

export interface LineError {
  line: number;
  code: "invalid_file" | "duplicate_custom_id" | "missing_field" | "invalid_value";
  param: string | null;
  message: string;
  /** Set when validation stopped on too many fingerprint hits: not itself a confirmed error. */
  unconfirmed?: boolean;
}

export interface ValidationResult {
  requests: number;
  /** Lines seen, blank ones included. */
  lines: number;
  error: LineError | null;
  /** Possible duplicates (line numbers and ids), to be confirmed exactly. */
  suspects: { line: number; customId: string }[];
}

export class BatchFileValidator {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  private readonly ids = new HashSet64(1 << 16);
  private carry: Uint8Array | null = null;
  private lineNo = 0;
  private requests = 0;
  private first = true;
  private error: LineError | null = null;
  private readonly suspects: { line: number; customId: string }[] = [];

  constructor(private readonly maxRequests: number) {}

  get failed(): boolean {
    return this.error !== null;
  }

  push(chunk: Uint8Array): void {
    if (this.error) return;
    let data = chunk;
    if (this.carry) {
      data = new Uint8Array(this.carry.length + chunk.length);
      data.set(this.carry, 0);
      data.set(chunk, this.carry.length);
      this.carry = null;
    }
    const lastNl = data.lastIndexOf(10);
    if (lastNl === -1) {
      if (data.length > MAX_LINE_BYTES) return this.fail(this.lineNo + 1, "invalid_file", null, `line ${this.lineNo + 1} is longer than ${MAX_LINE_BYTES} bytes`);
      this.carry = data;
      return;
    }
    if (lastNl + 1 < data.length) this.carry = data.slice(lastNl + 1);
    this.processWholeLines(data.subarray(0, lastNl + 1));
  }

  finish(): ValidationResult {
    if (!this.error && this.carry) {
      const rest = this.carry;
      this.carry = null;
      this.processWholeLines(rest);
    }
    if (!this.error && this.requests === 0) this.fail(Math.max(this.lineNo, 1), "invalid_file", null, "the file contains no requests");
    return { requests: this.requests, lines: this.lineNo, error: this.error, suspects: this.suspects };
  }

  private fail(line: number, code: LineError["code"], param: string | null, message: string): void {
    if (!this.error) this.error = { line, code, param, message };
  }

  /** `bytes` holds whole lines (the last may lack its newline at end of file). */
  private processWholeLines(bytes: Uint8Array): void {
    let text: string;
    try {
      text = this.decoder.decode(bytes);
    } catch {
      return this.failAtInvalidUtf8(bytes);
    }
    if (this.first) {
      this.first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    let start = 0;
    const end = text.length;
    while (start < end && !this.error) {
      let nl = text.indexOf("\n", start);
      if (nl === -1) nl = end;
      this.lineNo++;
      let stop = nl;
      if (stop > start && text.charCodeAt(stop - 1) === 13) stop--;
      if (stop - start > MAX_LINE_BYTES / 4 && byteLength(text, start, stop) > MAX_LINE_BYTES) {
        this.fail(this.lineNo, "invalid_file", null, `line ${this.lineNo} is longer than ${MAX_LINE_BYTES} bytes`);
      } else if (!isBlank(text, start, stop)) {
        this.checkLine(text.substring(start, stop));
      }
      start = nl + 1;
    }
  }

  private checkLine(line: string): void {
    const n = this.lineNo;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      return this.fail(n, "invalid_file", null, `line ${n} is not valid JSON`);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) return this.fail(n, "invalid_file", null, `line ${n} is not a JSON object`);
    const req = value as Record<string, unknown>;
    const id = req.custom_id;
    if (id === undefined || id === null) return this.fail(n, "missing_field", "custom_id", `line ${n}: custom_id is missing`);
    if (typeof id !== "string" || id.length === 0) return this.fail(n, "invalid_value", "custom_id", `line ${n}: custom_id must be a non-empty string`);
    if (req.method !== "POST") return this.fail(n, "invalid_value", "method", `line ${n}: method must be "POST"`);
    if (typeof req.url !== "string" || canonicalEndpoint(req.url) === undefined)
      return this.fail(n, "invalid_value", "url", `line ${n}: url must be /v1/chat/completions or /v1/embeddings`);
    const body = req.body;
    if (typeof body !== "object" || body === null || Array.isArray(body)) return this.fail(n, "invalid_value", "body", `line ${n}: body must be a JSON object`);
    const model = (body as Record<string, unknown>).model;
    if (typeof model !== "string" || model.length === 0) return this.fail(n, "missing_field", "body.model", `line ${n}: body.model must be a non-empty string`);
    if (++this.requests > this.maxRequests) return this.fail(n, "invalid_file", null, `line ${n}: the file has more than ${this.maxRequests} requests`);
    const [hi, lo] = fingerprint(id);
    if (!this.ids.add(hi, lo)) {
      this.suspects.push({ line: n, customId: id });
      if (this.suspects.length >= MAX_SUSPECTS) {
        // Stop here: the confirmation pass finds the first real duplicate among these.
        this.fail(n, "duplicate_custom_id", "custom_id", `line ${n}: too many possible duplicate custom_ids`);
        this.error!.unconfirmed = true;
      }
    }
  }

  /** Rare path: finds which line holds the invalid UTF-8 by decoding line by line. */
  private failAtInvalidUtf8(bytes: Uint8Array): void {
    const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    let start = 0;
    let line = this.lineNo;
    while (start < bytes.length) {
      let nl = bytes.indexOf(10, start);
      if (nl === -1) nl = bytes.length;
      line++;
      try {
        strict.decode(bytes.subarray(start, nl));
      } catch {
        return this.fail(line, "invalid_file", null, `line ${line} is not valid UTF-8`);
      }
      start = nl + 1;
    }
    this.fail(line, "invalid_file", null, `line ${line} is not valid UTF-8`);
  }
}

function isBlank(s: string, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c !== 32 && c !== 9 && c !== 13) return false;
  }
  return true;
}

function byteLength(s: string, start: number, end: number): number {
  return Buffer.byteLength(s.substring(start, end), "utf8");
}

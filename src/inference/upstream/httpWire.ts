// The bytes of an HTTP/1.1 answer, judged as llhttp (Node's parser) judges
// them, for offpeak's own client (./httpClient.ts): header names and lines,
// the status, and an answer whose whole body came with its head.
import { OwnAnswer, type HeaderReader } from "./answer";

/**
 * The bytes of an RFC 9110 token (a header name), by byte value (1: a token
 * byte). "Content-Length : 5" (space before the colon) is not a token, nor
 * is a folded line (it starts with a space or tab).
 */
export const TOKEN_BYTE = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") TOKEN_BYTE[c.charCodeAt(0)] = 1;
/** What ends a head: found as bytes (a string needle is encoded again on every search). */
export const HEAD_END = Buffer.from("\r\n\r\n");
/** A control character other than HTAB, a lone CR or a bare LF: llhttp refuses these in a status line or header (no lenient flags); chunk lines are judged by it. */
export const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;

/** Buffer's own decoders (Node's and Bun's, untyped in @types/node): a range as text with no view made of it. */
export type SliceBuffer = Buffer & { latin1Slice(start: number, end: number): string; utf8Slice(start: number, end: number): string };

/** Bytes [from, to) of `b` as a plain Uint8Array view: Buffer#subarray builds a Buffer through its species constructor (3.5% of the main thread in the chat pass-through). */
export function view(b: Uint8Array, from: number, to: number): Uint8Array {
  return from === 0 && to === b.length ? b : new Uint8Array(b.buffer, b.byteOffset + from, to - from);
}

/**
 * Where the head line starting at `from` ends (its CR) in `buf`, whose head
 * ends at `end` (the CR of the blank line): every byte on the way is
 * judged as llhttp judges it. A control character other than HTAB (NUL,
 * DEL, ...) is refused, and so are a bare LF and a CR not followed by LF
 * (the only CR taken is a line's end).
 */
export function lineEnd(buf: Buffer, from: number, end: number): number {
  for (let i = from; i < end; i++) {
    const c = buf[i]!;
    if (c >= 32) {
      if (c === 127) throw new Error("upstream sent a control character in its status line or a header");
      continue;
    }
    if (c === 9) continue;
    if (c === 13 && buf[i + 1] === 10) return i; // never at end - 1: buf[end] is the blank line's CR
    throw new Error(c === 10 || c === 13 ? "upstream sent a lone CR or a bare LF in its status line or a header" : "upstream sent a control character in its status line or a header");
  }
  return end;
}

/**
 * Whether the header name `buf[from, to)` (a token) is `lower` (a lower-case
 * name of letters and "-") in any case: a token byte ORed with 0x20 is one
 * of those only if it is that letter in either case, or "-".
 */
export function isName(buf: Buffer, from: number, to: number, lower: string): boolean {
  if (to - from !== lower.length) return false;
  for (let i = 0; i < lower.length; i++) if ((buf[from + i]! | 32) !== lower.charCodeAt(i)) return false;
  return true;
}

/** The headers at `kept` (name from, to; value from, to, each in `buf`) as pairs, names lower-cased. */
export function pairsOf(buf: Buffer, kept: readonly number[]): [string, string][] {
  const pairs: [string, string][] = [];
  for (let i = 0; i < kept.length; i += 4)
    pairs.push([(buf as SliceBuffer).latin1Slice(kept[i]!, kept[i + 1]!).toLowerCase(), (buf as SliceBuffer).latin1Slice(kept[i + 2]!, kept[i + 3]!)]);
  return pairs;
}

/**
 * The status of the status line `buf[0, to)` (its bytes judged already by
 * lineEnd), or -1 if it is not one llhttp takes: HTTP/1.0 or 1.1, a space,
 * three digits, then nothing or a space and a reason.
 */
export function statusOf(buf: Buffer, to: number): number {
  if (to < 12 || buf[0] !== 72 || buf[1] !== 84 || buf[2] !== 84 || buf[3] !== 80 || buf[4] !== 47 || buf[5] !== 49 || buf[6] !== 46) return -1; // "HTTP/1."
  if ((buf[7] !== 48 && buf[7] !== 49) || buf[8] !== 32) return -1;
  let status = 0;
  for (let i = 9; i < 12; i++) {
    const d = buf[i]! - 48;
    if (d < 0 || d > 9) return -1;
    status = status * 10 + d;
  }
  return to === 12 || buf[12] === 32 ? status : -1;
}

/**
 * An answer whose body came whole with its head (the usual JSON answer): its
 * text is decoded straight from the packet's bytes. A view of them (what
 * OwnAnswer takes) costs more than the decoding: `buffer` on the packet's
 * Buffer makes the engine build an ArrayBuffer for it (1.3% of the main
 * thread in the chat pass-through), and Buffer#subarray goes through its
 * species constructor. The view is made only if the body is read as a stream.
 */
export class WholeAnswer extends OwnAnswer {
  private bytes: Buffer | null;
  private taken: ReadableStream<Uint8Array> | null = null;
  /** Filled from the head on the first look at the headers. */
  private readonly pairsLater: [string, string][];
  private head: Buffer | null;

  constructor(
    status: number,
    head: Buffer,
    private readonly kept: readonly number[],
    bytes: Buffer,
    private readonly from: number,
    private readonly to: number,
  ) {
    const pairs: [string, string][] = [];
    super(status, pairs, null, null);
    this.pairsLater = pairs;
    this.head = kept.length > 0 ? head : null;
    this.bytes = bytes;
  }

  override get headers(): HeaderReader {
    const head = this.head;
    if (head) {
      this.head = null;
      this.pairsLater.push(...pairsOf(head, this.kept));
    }
    return super.headers;
  }

  override get body(): ReadableStream<Uint8Array> | null {
    const bytes = this.bytes;
    if (bytes) {
      this.bytes = null;
      const whole = view(bytes, this.from, this.to);
      this.taken = new ReadableStream<Uint8Array>({
        start(c) {
          if (whole.length > 0) c.enqueue(whole);
          c.close();
        },
      });
    }
    return this.taken;
  }

  override text(): Promise<string> {
    const bytes = this.bytes;
    if (bytes) {
      this.bytes = null;
      // As TextDecoder (OwnAnswer's) reads it: a leading byte order mark is dropped.
      const from = bytes[this.from] === 0xef && bytes[this.from + 1] === 0xbb && bytes[this.from + 2] === 0xbf && this.to - this.from >= 3 ? this.from + 3 : this.from;
      return Promise.resolve((bytes as SliceBuffer).utf8Slice(from, this.to));
    }
    // Read as a stream already (or read): what OwnAnswer does then.
    const taken = this.taken;
    if (!taken) return Promise.resolve("");
    this.taken = null;
    return new Response(taken).text();
  }
}

/** One request and its answer, on one connection (or two: see connectionClosed). */

// Byte-level fast path of the batch line check (see batchFileValidator.ts).
//
// `scanRequestLine` walks one line's UTF-8 bytes once, with no decoding and
// no allocation, and answers only "certainly a valid request line" (true) or
// "not sure" (false). It checks the strict JSON grammar, UTF-8 inside
// strings, and the batch fields: custom_id (a non-empty string), method
// "POST", a supported url, and a body object with a non-empty string model.
// Anything unusual — an escape in a key or in one of those values, a
// repeated key, deep nesting, any error — answers "not sure", and the caller
// runs the exact JSON.parse path, which alone words the error messages. So
// this code can make validation faster but can never change its verdict.
import { BATCH_URLS } from "../endpoints";

/** Where the custom_id's bytes are (between its quotes; it has no escapes). */
export interface ScanResult {
  idStart: number;
  idEnd: number;
}

/** Nesting deeper than this goes to JSON.parse, which knows its own limits. */
const MAX_DEPTH = 64;
const OBJ = 1;
const ARR = 2;
const stack = new Uint8Array(MAX_DEPTH + 1);

const enc = new TextEncoder();
const CUSTOM_ID = enc.encode("custom_id");
const METHOD = enc.encode("method");
const URL_ = enc.encode("url");
const BODY = enc.encode("body");
const MODEL = enc.encode("model");
const POST = enc.encode("POST");
const URLS = [...BATCH_URLS.keys()].map((u) => enc.encode(u));

/** Set by scanString: whether the string just scanned held a backslash escape. */
let hadEscape = false;

export function scanRequestLine(b: Uint8Array, start: number, end: number, out: ScanResult): boolean {
  let i = ws(b, start, end);
  if (i >= end || b[i] !== 123) return false;
  i = ws(b, i + 1, end);
  let seen = 0;
  for (;;) {
    if (i >= end || b[i] !== 34) return false;
    const keyStart = i + 1;
    i = scanString(b, keyStart, end);
    if (i < 0 || hadEscape) return false;
    const keyEnd = i - 1;
    i = ws(b, i, end);
    if (i >= end || b[i] !== 58) return false;
    i = ws(b, i + 1, end);
    if (i >= end) return false;
    const key = topKey(b, keyStart, keyEnd);
    if (key !== 0) {
      if (seen & key) return false; // a repeated key: JSON.parse keeps the last; let it decide
      seen |= key;
    }
    if (key === 1 || key === 2 || key === 4) {
      if (b[i] !== 34) return false;
      const vStart = i + 1;
      i = scanString(b, vStart, end);
      if (i < 0 || hadEscape) return false;
      const vEnd = i - 1;
      if (key === 1) {
        if (vEnd === vStart) return false;
        out.idStart = vStart;
        out.idEnd = vEnd;
      } else if (key === 2) {
        if (!equals(b, vStart, vEnd, POST)) return false;
      } else if (!isBatchUrl(b, vStart, vEnd)) return false;
    } else if (key === 8) {
      i = scanBody(b, i, end);
    } else {
      i = skipValue(b, i, end);
    }
    if (i < 0) return false;
    i = ws(b, i, end);
    if (i >= end) return false;
    if (b[i] === 44) {
      i = ws(b, i + 1, end);
      continue;
    }
    if (b[i] !== 125) return false;
    i = ws(b, i + 1, end);
    return i === end && seen === 15;
  }
}

function isBatchUrl(b: Uint8Array, s: number, e: number): boolean {
  for (let k = 0; k < URLS.length; k++) if (equals(b, s, e, URLS[k]!)) return true;
  return false;
}

/** 1 custom_id, 2 method, 4 url, 8 body, 0 anything else. */
function topKey(b: Uint8Array, s: number, e: number): number {
  switch (e - s) {
    case 9:
      return equals(b, s, e, CUSTOM_ID) ? 1 : 0;
    case 6:
      return equals(b, s, e, METHOD) ? 2 : 0;
    case 3:
      return equals(b, s, e, URL_) ? 4 : 0;
    case 4:
      return equals(b, s, e, BODY) ? 8 : 0;
    default:
      return 0;
  }
}

/** The body object: any members, exactly one "model" holding a non-empty string. */
function scanBody(b: Uint8Array, i: number, end: number): number {
  if (b[i] !== 123) return -1;
  i = ws(b, i + 1, end);
  let model = false;
  for (;;) {
    if (i >= end || b[i] !== 34) return -1;
    const keyStart = i + 1;
    i = scanString(b, keyStart, end);
    if (i < 0 || hadEscape) return -1;
    const isModel = equals(b, keyStart, i - 1, MODEL);
    i = ws(b, i, end);
    if (i >= end || b[i] !== 58) return -1;
    i = ws(b, i + 1, end);
    if (i >= end) return -1;
    if (isModel) {
      if (model || b[i] !== 34) return -1;
      const vStart = i + 1;
      i = scanString(b, vStart, end);
      if (i < 0 || hadEscape || i - 1 === vStart) return -1;
      model = true;
    } else {
      i = skipValue(b, i, end);
      if (i < 0) return -1;
    }
    i = ws(b, i, end);
    if (i >= end) return -1;
    if (b[i] === 44) {
      i = ws(b, i + 1, end);
      continue;
    }
    if (b[i] !== 125) return -1;
    return model ? i + 1 : -1;
  }
}

/** Any JSON value starting at `i` (not whitespace); returns the index after it, or -1. */
function skipValue(b: Uint8Array, i: number, end: number): number {
  let depth = 0;
  for (;;) {
    // A value starts at i.
    if (i >= end) return -1;
    const c = b[i]!;
    if (c === 34) {
      i = scanString(b, i + 1, end);
    } else if (c === 123 || c === 91) {
      i = ws(b, i + 1, end);
      if (i >= end) return -1;
      if (b[i] === (c === 123 ? 125 : 93)) {
        i++;
      } else {
        if (++depth > MAX_DEPTH) return -1;
        stack[depth] = c === 123 ? OBJ : ARR;
        if (c === 123) {
          i = memberKey(b, i, end);
          if (i < 0) return -1;
        }
        continue;
      }
    } else if (c === 45 || (c >= 48 && c <= 57)) {
      i = scanNumber(b, i, end);
    } else if (c === 116) {
      i = literal(b, i, end, 0x74, 0x72, 0x75, 0x65, 4); // true
    } else if (c === 102) {
      i = b[i + 4] === 0x65 && i + 5 <= end ? literal(b, i, end, 0x66, 0x61, 0x6c, 0x73, 5) : -1; // false
    } else if (c === 110) {
      i = literal(b, i, end, 0x6e, 0x75, 0x6c, 0x6c, 4); // null
    } else return -1;
    if (i < 0) return -1;
    // After a value: commas and closing brackets.
    for (;;) {
      if (depth === 0) return i;
      i = ws(b, i, end);
      if (i >= end) return -1;
      const d = b[i]!;
      if (d === 44) {
        i = ws(b, i + 1, end);
        if (stack[depth] === OBJ) {
          i = memberKey(b, i, end);
          if (i < 0) return -1;
        }
        break;
      }
      if (d !== (stack[depth] === OBJ ? 125 : 93)) return -1;
      i++;
      depth--;
    }
  }
}

/** `"key" :` then whitespace; returns the index of the member's value. */
function memberKey(b: Uint8Array, i: number, end: number): number {
  if (i >= end || b[i] !== 34) return -1;
  i = scanString(b, i + 1, end);
  if (i < 0) return -1;
  i = ws(b, i, end);
  if (i >= end || b[i] !== 58) return -1;
  return ws(b, i + 1, end);
}

function literal(b: Uint8Array, i: number, end: number, c0: number, c1: number, c2: number, c3: number, len: number): number {
  if (i + len > end || b[i] !== c0 || b[i + 1] !== c1 || b[i + 2] !== c2 || b[i + 3] !== c3) return -1;
  return i + len;
}

/** `-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?` */
function scanNumber(b: Uint8Array, i: number, end: number): number {
  if (b[i] === 45) i++;
  if (i >= end) return -1;
  if (b[i] === 48) i++;
  else if (b[i]! >= 49 && b[i]! <= 57) while (i < end && b[i]! >= 48 && b[i]! <= 57) i++;
  else return -1;
  if (i < end && b[i] === 46) {
    const s = ++i;
    while (i < end && b[i]! >= 48 && b[i]! <= 57) i++;
    if (i === s) return -1;
  }
  if (i < end && (b[i] === 101 || b[i] === 69)) {
    i++;
    if (i < end && (b[i] === 43 || b[i] === 45)) i++;
    const s = i;
    while (i < end && b[i]! >= 48 && b[i]! <= 57) i++;
    if (i === s) return -1;
  }
  return i;
}

/** From after the opening quote; returns the index after the closing quote, or -1. Sets hadEscape. */
function scanString(b: Uint8Array, i: number, end: number): number {
  hadEscape = false;
  for (;;) {
    // The common case: plain ASCII (one table load per byte).
    while (i < end && PLAIN[b[i]!] === 1) i++;
    if (i >= end) return -1;
    const c = b[i]!;
    if (c === 34) return i + 1;
    if (c === 92) {
      hadEscape = true;
      const e = b[i + 1];
      if (i + 1 >= end) return -1;
      if (e === 117) {
        if (i + 6 > end || !hex(b[i + 2]!) || !hex(b[i + 3]!) || !hex(b[i + 4]!) || !hex(b[i + 5]!)) return -1;
        i += 6;
      } else if (e === 34 || e === 92 || e === 47 || e === 98 || e === 102 || e === 110 || e === 114 || e === 116) i += 2;
      else return -1;
    } else if (c < 32) return -1;
    else {
      i = utf8Sequence(b, i, end);
      if (i < 0) return -1;
    }
  }
}

/** 1 for bytes that may appear unescaped in a string and need no further look: printable ASCII but `"` and `\`. */
const PLAIN = new Uint8Array(256);
for (let c = 32; c < 128; c++) if (c !== 34 && c !== 92) PLAIN[c] = 1;

const hex = (c: number) => (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
const cont = (c: number | undefined) => c !== undefined && (c & 0xc0) === 0x80;

/** One well-formed multi-byte UTF-8 sequence at i (RFC 3629: no overlongs, no surrogates, ≤ U+10FFFF). */
function utf8Sequence(b: Uint8Array, i: number, end: number): number {
  const c = b[i]!;
  if (c >= 0xc2 && c <= 0xdf) return i + 2 <= end && cont(b[i + 1]) ? i + 2 : -1;
  if (c >= 0xe0 && c <= 0xef) {
    if (i + 3 > end) return -1;
    const c1 = b[i + 1]!;
    const lo = c === 0xe0 ? 0xa0 : 0x80;
    const hi = c === 0xed ? 0x9f : 0xbf;
    return c1 >= lo && c1 <= hi && cont(b[i + 2]) ? i + 3 : -1;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (i + 4 > end) return -1;
    const c1 = b[i + 1]!;
    const lo = c === 0xf0 ? 0x90 : 0x80;
    const hi = c === 0xf4 ? 0x8f : 0xbf;
    return c1 >= lo && c1 <= hi && cont(b[i + 2]) && cont(b[i + 3]) ? i + 4 : -1;
  }
  return -1;
}

function ws(b: Uint8Array, i: number, end: number): number {
  while (i < end) {
    const c = b[i];
    if (c !== 32 && c !== 9 && c !== 13 && c !== 10) break;
    i++;
  }
  return i;
}

function equals(b: Uint8Array, s: number, e: number, want: Uint8Array): boolean {
  if (e - s !== want.length) return false;
  for (let k = 0; k < want.length; k++) if (b[s + k] !== want[k]) return false;
  return true;
}

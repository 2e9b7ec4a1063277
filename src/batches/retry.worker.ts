// The Worker of POST /batches/{id}/retry: reads the batch's error file (the
// custom_ids that failed), then its input file, and sends back the original
// request line of every failed custom_id, in input order. Both files come in
// as chunks the main thread reads from storage when asked ("pull"), so this
// Worker needs no access to storage and memory holds only the failed ids and
// about a megabyte of output at a time.
//
// Lines are handled as bytes: no chunk is decoded, no line becomes a string
// or an object, and a failed line's bytes are copied straight into the output
// block. Only each custom_id is decoded. (Decoding every chunk and parsing
// every line, this Worker alone raised the process's peak RSS by 240-250 MB
// on a 1M-line input with 100,000 failures; reading bytes, by 90-100 MB,
// and in less time.) A custom_id is read from the bytes where that is certain: an input
// line that the batch validator's byte scanner accepts (scanRequestLine: no
// escape in the id, no repeated key), an error line in the shape offpeak
// writes ({"id":"batch_req_…","custom_id":"…",…} with no escape in either
// string). Any other line is decoded and parsed with JSON.parse, as before.
import { scanRequestLine, type ScanResult } from "../jsonl/lineScan";

declare const self: Worker;

export type RetryToWorker = { type: "start" } | { type: "chunk"; which: "err" | "in"; data: Uint8Array | null };
export type RetryFromWorker =
  | { type: "pull"; which: "err" | "in" }
  | { type: "out"; data: Uint8Array }
  | { type: "done"; lines: number; missing: number }
  | { type: "error"; message: string };

const post = (m: RetryFromWorker, transfer: ArrayBuffer[] = []) => self.postMessage(m, transfer);
const waiting = new Map<string, (c: Uint8Array | null) => void>();

function pull(which: "err" | "in"): Promise<Uint8Array | null> {
  return new Promise<Uint8Array | null>((resolve) => {
    waiting.set(which, resolve);
    post({ type: "pull", which });
  });
}

/**
 * Calls `fn(bytes, start, end)` for each line of a pulled file (without its
 * newline, a CR before it, or a leading BOM), until the end or until `fn`
 * returns false.
 */
async function eachLine(which: "err" | "in", fn: (b: Uint8Array, start: number, end: number) => boolean): Promise<void> {
  let carry: Uint8Array | null = null;
  let first = true;
  for (;;) {
    const chunk = await pull(which);
    if (chunk === null) break;
    let data: Uint8Array = chunk;
    if (carry) {
      data = new Uint8Array(carry.length + chunk.length);
      data.set(carry, 0);
      data.set(chunk, carry.length);
      carry = null;
    }
    let start = 0;
    if (first) {
      // A BOM only at the very start of the file: wait for its first 3 bytes (or its first line).
      if (data.length < 3 && data.indexOf(10) === -1) {
        carry = data;
        continue;
      }
      first = false;
      if (data.length >= 3 && data[0] === 0xef && data[1] === 0xbb && data[2] === 0xbf) start = 3;
    }
    for (;;) {
      const nl = data.indexOf(10, start);
      if (nl === -1) break;
      const end = nl > start && data[nl - 1] === 13 ? nl - 1 : nl;
      if (!fn(data, start, end)) return;
      start = nl + 1;
    }
    if (start < data.length) carry = data.slice(start);
  }
  if (carry) {
    const end = carry.length > 0 && carry[carry.length - 1] === 13 ? carry.length - 1 : carry.length;
    fn(carry, 0, end);
  }
}

// ignoreBOM: a U+FEFF at the start of a line or of an id is kept, as JSON.parse sees it.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
const text = (b: Uint8Array, s: number, e: number) => decoder.decode(b.subarray(s, e));

/** The custom_id of any line, the exact way: decoded and parsed. null for a blank line. */
function parsedId(b: Uint8Array, s: number, e: number): string | null {
  const t = text(b, s, e);
  if (t.trim() === "") return null;
  return (JSON.parse(t) as { custom_id: string }).custom_id;
}

const ERR_HEAD = new TextEncoder().encode('{"id":"batch_req_');
const ERR_ID = new TextEncoder().encode('","custom_id":"');

/** Bytes s..e hold no '"' or '\'? Returns the index of the first '"' (or -1 on a backslash or no quote). */
function quoteAt(b: Uint8Array, s: number, e: number): number {
  for (let i = s; i < e; i++) {
    const c = b[i]!;
    if (c === 34) return i;
    if (c === 92) return -1;
  }
  return -1;
}

function startsWith(b: Uint8Array, s: number, e: number, p: Uint8Array): boolean {
  if (e - s < p.length) return false;
  for (let k = 0; k < p.length; k++) if (b[s + k] !== p[k]) return false;
  return true;
}

/** The custom_id of an error-file line: read from the bytes when the line has offpeak's own shape, parsed otherwise. */
function errorLineId(b: Uint8Array, s: number, e: number): string | null {
  if (startsWith(b, s, e, ERR_HEAD)) {
    const q = quoteAt(b, s + ERR_HEAD.length, e);
    if (q > 0 && startsWith(b, q, e, ERR_ID)) {
      const idStart = q + ERR_ID.length;
      const idEnd = quoteAt(b, idStart, e);
      if (idEnd > 0) return text(b, idStart, idEnd);
    }
  }
  return parsedId(b, s, e);
}

const scan: ScanResult = { idStart: 0, idEnd: 0 };

/** The custom_id of an input line: where the validator's scanner finds it, else parsed. */
function inputLineId(b: Uint8Array, s: number, e: number): string | null {
  if (scanRequestLine(b, s, e, scan)) return text(b, scan.idStart, scan.idEnd);
  return parsedId(b, s, e);
}

const OUT_BYTES = 1 << 20;

async function run(): Promise<void> {
  const failed = new Set<string>();
  await eachLine("err", (b, s, e) => {
    const id = errorLineId(b, s, e);
    if (id !== null) failed.add(id);
    return true;
  });
  let out = new Uint8Array(OUT_BYTES);
  let used = 0;
  let found = 0;
  const flush = () => {
    if (used === 0) return;
    const data = out.subarray(0, used);
    post({ type: "out", data }, [out.buffer]);
    out = new Uint8Array(OUT_BYTES);
    used = 0;
  };
  await eachLine("in", (b, s, e) => {
    if (failed.size === 0) return false; // every failed line found: the rest of the input is not needed
    const id = inputLineId(b, s, e);
    // delete: each custom_id once, even if the error file had it twice.
    if (id === null || !failed.delete(id)) return true;
    const n = e - s + 1;
    if (used + n > out.length) flush();
    if (n > out.length) {
      const big = new Uint8Array(n);
      big.set(b.subarray(s, e), 0);
      big[n - 1] = 10;
      post({ type: "out", data: big }, [big.buffer]);
    } else {
      out.set(b.subarray(s, e), used);
      out[used + n - 1] = 10;
      used += n;
    }
    found++;
    return true;
  });
  flush();
  post({ type: "done", lines: found, missing: failed.size });
}

self.onmessage = (e: MessageEvent<RetryToWorker>) => {
  const m = e.data;
  if (m.type === "start")
    run().catch((err) => post({ type: "error", message: String((err as Error)?.message ?? err) }));
  else {
    const resolve = waiting.get(m.which);
    waiting.delete(m.which);
    resolve?.(m.data);
  }
};

// The body of POST /v1/messages/batches, `{"requests": [{…}, {…}, …]}`, read
// as it streams (docs/CONTRACT.md §22: up to 256 MB, never held whole): a
// scanner for this one shape that hands over each element of `requests` as
// its own JSON text, for JSON.parse one at a time. Each chunk is decoded
// once and scanned as text (an element is a slice of it: decoding each
// element by itself cost as much as parsing it). Only the elements that end
// in the chunk being read are held (plus that chunk).
//
// The shape around the elements is checked here: one top-level object whose
// only key is `requests`, an array of objects; anything else is a 400
// (invalid_json for bad syntax, invalid_value / missing_field otherwise).
// Each element's own syntax is JSON.parse's to judge.
import { ApiError } from "../../errors";
import type { ChunkReader } from "../../files/multipart";

const WS = new Uint8Array(256);
for (const c of [0x20, 0x09, 0x0a, 0x0d]) WS[c] = 1;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const syntax = (what: string) => new ApiError("invalid_json", `The request body is not valid JSON: ${what}`);
export const tooLarge = (max: number) =>
  new ApiError("request_too_large", `The request body exceeds the maximum size of ${max} bytes`, { headers: { connection: "close" } });

/** One element of `requests`: its index and its JSON text. */
export interface RequestElement {
  index: number;
  text: string;
}

/**
 * Where the scanner is in the shape around the elements:
 *  start → `{` → keys (`"requests"` `:` `[` elements `]`, `,` …) → `}` → end.
 */
type Phase = "start" | "beforeKey" | "key" | "colon" | "value" | "firstElement" | "nextElement" | "element" | "afterElement" | "end";

/**
 * Yields the elements of the body's `requests` array in order, those that
 * end in each chunk read together, up to GROUP at a time (one step of the
 * generator per element, 100,000 of them, made a message batch's create
 * slower; a whole chunk's, when a chunk holds much of the body, held them
 * all).
 * (The body's size limit and an Idempotency-Key's digest are the reader's
 * caller's: ./create.ts reads the body and hands the chunks over.)
 * A refusal of the body's shape comes after the elements before it.
 */
export async function* readRequests(body: ChunkReader): AsyncGenerator<RequestElement[]> {
  let done: RequestElement[] = [];
  try {
    for await (const _ of elements(body, (e) => done.push(e))) {
      if (done.length > 0) {
        yield done;
        done = [];
      }
    }
  } catch (e) {
    // The elements before the refusal first: a bad one among them is the answer (as when they came one by one).
    if (done.length > 0) yield done;
    throw e;
  }
  if (done.length > 0) yield done;
}

/** No backslash left in the chunk. */
const NONE = -2;

/** Elements handed over together at most. */
const GROUP = 256;

/** Reads the body; `take` gets each element as it ends; yields once per chunk read, and after every GROUP elements. */
async function* elements(body: ChunkReader, take: (e: RequestElement) => void): AsyncGenerator<void> {
  const decoder = new TextDecoder();
  let phase: Phase = "start";
  let sawRequests = false;
  let index = 0;
  // The element being read: its text from earlier chunks.
  let pieces = "";
  let depth = 0;
  let inString = false;
  let escaped = false;
  // The top-level key being read (only "requests" is taken; a longer name is cut for the message).
  let key = "";
  let keyEscaped = false;

  for (;;) {
    const { done, value: c } = await body.read();
    if (done) break;
    if (!c || c.length === 0) continue;
    // A character cut between chunks is kept by the decoder for the next.
    const t = decoder.decode(c, { stream: true });
    const n = t.length;
    let i = 0;
    // The next backslash in this chunk at or after where a string is read (-1: not looked for yet; NONE: there is none).
    let backslashAt = -1;
    // An element that began in an earlier chunk goes on from the chunk's start.
    let elementStart = phase === "element" ? 0 : -1;
    while (i < n) {
      if (phase === "element") {
        // To the element's closing brace, minding strings: a string is skipped
        // to its closing quote by indexOf, not a character at a time (most of
        // a request is the text of its strings).
        let closed = false;
        while (i < n) {
          if (inString) {
            if (escaped) {
              escaped = false;
              i++;
              continue;
            }
            if (backslashAt !== NONE && backslashAt < i) {
              const at = t.indexOf("\\", i);
              backslashAt = at === -1 ? NONE : at;
            }
            const quoteAt = t.indexOf('"', i);
            if (backslashAt !== NONE && (quoteAt === -1 || backslashAt < quoteAt)) {
              i = backslashAt + 1;
              escaped = true;
            } else if (quoteAt === -1) i = n;
            else {
              i = quoteAt + 1;
              inString = false;
            }
            continue;
          }
          const b = t.charCodeAt(i++);
          if (b === QUOTE) inString = true;
          else if (b === OPEN_OBJECT || b === OPEN_ARRAY) depth++;
          else if ((b === CLOSE_OBJECT || b === CLOSE_ARRAY) && --depth === 0) {
            closed = true;
            break;
          }
        }
        if (!closed) break; // kept below, with the rest of this chunk
        const text = pieces + t.slice(elementStart, i);
        pieces = "";
        take({ index: index++, text });
        phase = "afterElement";
        // A chunk may be large (a body that came in faster than it is read): at most GROUP elements are held.
        if (index % GROUP === 0) yield;
        continue;
      }
      const b = t.charCodeAt(i++);
      if (phase === "key") {
        if (keyEscaped) {
          keyEscaped = false;
          if (key.length < 64) key += t[i - 1];
        } else if (b === BACKSLASH) keyEscaped = true;
        else if (b === QUOTE) phase = "colon";
        else if (key.length < 64) key += t[i - 1];
        continue;
      }
      if (b < 256 && WS[b]) continue;
      switch (phase) {
        case "start":
          if (b !== OPEN_OBJECT) throw new ApiError("invalid_value", "The request body must be a JSON object with `requests`");
          phase = "beforeKey";
          break;
        case "beforeKey":
          // After `{`, or after the array's `]` (then `,` or `}`).
          if (b === CLOSE_OBJECT) phase = "end";
          else if (b === COMMA && sawRequests) phase = "beforeKey";
          else if (b === QUOTE) {
            key = "";
            phase = "key";
          } else throw syntax("expected a key or '}'");
          break;
        case "colon": {
          if (b !== COLON) throw syntax("expected ':' after a key");
          const name = key;
          if (name !== "requests") throw new ApiError("invalid_value", `${name}: Extra inputs are not permitted`, { param: name });
          if (sawRequests) throw new ApiError("invalid_value", "requests: given more than once", { param: "requests" });
          sawRequests = true;
          phase = "value";
          break;
        }
        case "value":
          if (b !== OPEN_ARRAY) throw new ApiError("invalid_value", "requests: must be an array", { param: "requests" });
          phase = "firstElement";
          break;
        case "afterElement":
          if (b === CLOSE_ARRAY) phase = "beforeKey";
          else if (b === COMMA) phase = "nextElement";
          else throw syntax(`expected ',' or ']' after requests.${index - 1}`);
          break;
        case "firstElement":
        case "nextElement":
          if (b === CLOSE_ARRAY && phase === "firstElement") phase = "beforeKey";
          else if (b !== OPEN_OBJECT) throw new ApiError("invalid_value", `requests.${index}: must be an object`, { param: `requests.${index}` });
          else {
            phase = "element";
            elementStart = i - 1;
            depth = 1;
            inString = false;
            escaped = false;
          }
          break;
        case "end":
          throw syntax("more after the closing '}'");
      }
    }
    if (phase === "element") pieces += t.slice(elementStart, n);
    yield;
  }
  // Bytes the decoder still held: an unfinished character, after the end or in the middle of it.
  if (decoder.decode().length > 0 && phase === "end") throw syntax("more after the closing '}'");
  if (phase !== "end") throw phase === "start" ? new ApiError("invalid_value", "The request body must be a JSON object with `requests`") : syntax("it ends early");
  if (!sawRequests) throw new ApiError("missing_field", "requests: Field required", { param: "requests" });
}

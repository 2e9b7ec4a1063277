// Where and why a line is not JSON, for the upload's error message (docs/CONTRACT.md
// §19: "line 3, column 17: not valid JSON: expected ',' or '}' after an
// object member, found 'x'"). JSON.parse says neither in Bun (JavaScriptCore
// words it "JSON Parse error: Expected '}'", with no position), so this
// walks the line once more, by RFC 8259, and stops at the first byte that
// cannot be there. Only a line already refused runs through it: it is
// written for clear messages, not speed. No recursion: a line nested 100,000
// deep is walked like any other.

export interface JsonSyntaxError {
  /** UTF-16 index into the text where the error is (text.length: the line ended too soon). */
  index: number;
  reason: string;
}

const isDigit = (c: number) => c >= 48 && c <= 57;
const isWs = (c: number) => c === 32 || c === 9 || c === 10 || c === 13;

/** How the character at `i` reads in a message: 'x', a whole word ('undefined'), or U+0007. */
function shown(text: string, i: number): string {
  if (i >= text.length) return "the end of the line";
  const word = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i, i + 40));
  if (word) return `'${word[0].length > 20 ? word[0].slice(0, 20) + "…" : word[0]}'`;
  const cp = text.codePointAt(i)!;
  if (cp < 0x20 || cp === 0x7f || cp === 0xfeff || (cp >= 0x80 && cp < 0xa0)) return `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
  return `'${String.fromCodePoint(cp)}'`;
}

/** The first syntax error of `text` as one JSON value, or null if it is valid JSON. */
export function findJsonSyntaxError(text: string): JsonSyntaxError | null {
  const n = text.length;
  const stack: number[] = []; // 123 '{' or 91 '['
  let i = 0;
  const ws = () => {
    while (i < n && isWs(text.charCodeAt(i))) i++;
  };
  const at = (reason: string): JsonSyntaxError => ({ index: i, reason });
  const expected = (what: string) => at(`expected ${what}, found ${shown(text, i)}`);
  const ended = (): JsonSyntaxError => {
    const missing = stack
      .map((c) => (c === 123 ? "}" : "]"))
      .reverse()
      .join("");
    return at(missing ? `the line ends before the JSON value is complete (missing '${missing}')` : "the line ends before the JSON value is complete");
  };

  const string = (): JsonSyntaxError | null => {
    i++; // the opening quote
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 34) {
        i++;
        return null;
      }
      if (c === 92) {
        const e = text[i + 1];
        if (e === undefined) break;
        if (e === "u") {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) return at(`bad escape in a string: \\u needs four hex digits`);
          i += 6;
          continue;
        }
        if (!'"\\/bfnrt'.includes(e)) return at(`bad escape in a string: \\${e} (valid: \\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)`);
        i += 2;
        continue;
      }
      if (c < 0x20) return at(`a string holds the control character ${shown(text, i)}: write it escaped (\\n, \\t, \\u00XX)`);
      i++;
    }
    return at("the line ends inside a string (a closing '\"' is missing)");
  };

  const number = (): JsonSyntaxError | null => {
    if (text[i] === "-") i++;
    if (i >= n || !isDigit(text.charCodeAt(i))) return expected("a digit");
    if (text[i] === "0") {
      i++;
      if (i < n && isDigit(text.charCodeAt(i))) return at("a number must not start with 0 (leading zeros)");
    } else while (i < n && isDigit(text.charCodeAt(i))) i++;
    if (text[i] === ".") {
      i++;
      if (i >= n || !isDigit(text.charCodeAt(i))) return expected("a digit after the decimal point");
      while (i < n && isDigit(text.charCodeAt(i))) i++;
    }
    if (text[i] === "e" || text[i] === "E") {
      i++;
      if (text[i] === "+" || text[i] === "-") i++;
      if (i >= n || !isDigit(text.charCodeAt(i))) return expected("a digit in the exponent");
      while (i < n && isDigit(text.charCodeAt(i))) i++;
    }
    return null;
  };

  /** A member's key and its colon; i ends on the value. */
  const key = (): JsonSyntaxError | null => {
    ws();
    if (i >= n) return ended();
    if (text[i] === "'") return at("object keys must be in double quotes, found '");
    if (text[i] !== '"') return expected("a key in double quotes");
    const e = string();
    if (e) return e;
    ws();
    if (i >= n) return ended();
    if (text[i] !== ":") return expected("':' after the key");
    i++;
    return null;
  };

  let wantValue = true;
  for (;;) {
    ws();
    if (wantValue) {
      if (i >= n) return ended();
      const c = text.charCodeAt(i);
      if (c === 123 || c === 91) {
        i++;
        ws();
        if (text.charCodeAt(i) === c + 2) {
          i++; // {} or []
          wantValue = false;
          continue;
        }
        stack.push(c);
        if (c === 123) {
          const e = key();
          if (e) return e;
        }
        continue;
      }
      if (c === 34) {
        const e = string();
        if (e) return e;
      } else if (c === 45 || isDigit(c)) {
        const e = number();
        if (e) return e;
      } else if (text.startsWith("true", i)) i += 4;
      else if (text.startsWith("false", i)) i += 5;
      else if (text.startsWith("null", i)) i += 4;
      else if (c === 39) return at("strings must be in double quotes, found '");
      else return expected("a value (object, array, string, number, true, false or null)");
      wantValue = false;
      continue;
    }
    const top = stack[stack.length - 1];
    if (top === undefined) return i >= n ? null : at(`unexpected ${shown(text, i)} after the JSON value (one value per line)`);
    if (i >= n) return ended();
    const c = text.charCodeAt(i);
    if (c === 44) {
      const comma = i;
      i++;
      ws();
      if (text.charCodeAt(i) === top + 2) {
        i = comma;
        return at(`a trailing comma before '${top === 123 ? "}" : "]"}'`);
      }
      if (top === 123) {
        const e = key();
        if (e) return e;
      }
      wantValue = true;
      continue;
    }
    if (c === top + 2) {
      stack.pop();
      i++;
      continue;
    }
    return expected(top === 123 ? "',' or '}' after an object member" : "',' or ']' after an array element");
  }
}

/** 1-based byte column of UTF-16 index `index` in `text` (what a byte-counting tool shows). */
export function byteColumn(text: string, index: number): number {
  return Buffer.byteLength(text.slice(0, index), "utf8") + 1;
}

/** "line 3, column 17: not valid JSON: …" for a line JSON.parse refused (its own message if this finds nothing). */
export function invalidJsonMessage(lineNo: number, text: string, parseError: unknown): string {
  const e = findJsonSyntaxError(text);
  if (!e) return `line ${lineNo} is not valid JSON (${String((parseError as Error)?.message ?? parseError).replace(/^JSON Parse error:\s*/, "")})`;
  return `line ${lineNo}, column ${byteColumn(text, e.index)}: not valid JSON: ${e.reason}`;
}

/** The first byte of b[start, end) that is not well-formed UTF-8 (as TextDecoder's fatal mode sees it), as an offset from `start`; -1 if none. */
export function firstInvalidUtf8(b: Uint8Array, start: number, end: number): number {
  let i = start;
  while (i < end) {
    const c = b[i]!;
    if (c < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f; // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    } else return i - start;
    for (let k = 1; k <= need; k++) {
      const d = b[i + k];
      if (i + k >= end || d === undefined) return i - start;
      if (k === 1 ? d < lo || d > hi : d < 0x80 || d > 0xbf) return i - start;
    }
    i += need + 1;
  }
  return -1;
}

// The built-in models count tokens as runs of word characters and single
// punctuation marks: deterministic, cheap, and close enough to real
// tokenizers for usage and rate-limit arithmetic to behave realistically.
// A char-code scanner, not a Unicode regex: in the batch path it runs for
// every line, and the /\p{L}/u regex cost ≈3 µs a line.

/** ASCII letters, digits, "_" and every non-ASCII code unit that is not a space. */
function isWord(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95 || (c > 127 && !isSpace(c));
}

function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x2028 || c === 0x2029 || c === 0x3000 || c === 0xfeff || (c >= 0x2000 && c <= 0x200a);
}

/** Calls `onToken(start, end)` for each token of `text`; returns the count. */
function scan(text: string, onToken?: (start: number, end: number) => void): number {
  let n = 0;
  let i = 0;
  const len = text.length;
  while (i < len) {
    const c = text.charCodeAt(i);
    if (isSpace(c)) {
      i++;
      continue;
    }
    const start = i;
    if (isWord(c)) {
      i++;
      while (i < len && isWord(text.charCodeAt(i))) i++;
    } else i++;
    n++;
    onToken?.(start, i);
  }
  return n;
}

export function countTokens(text: string): number {
  return scan(text);
}

/** Splits text into tokens that concatenate back to it (whitespace rides with the following token). */
export function tokenize(text: string): string[] {
  const out: string[] = [];
  let last = 0;
  scan(text, (_start, end) => {
    out.push(text.slice(last, end));
    last = end;
  });
  if (last < text.length && out.length > 0) out[out.length - 1] += text.slice(last);
  return out;
}

/** The text of a message `content`: a string, or the text parts of a content array. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    let s = "";
    for (const part of content) if (part && typeof part === "object" && typeof (part as { text?: unknown }).text === "string") s += (s ? "\n" : "") + (part as { text: string }).text;
    return s;
  }
  return "";
}

/** Prompt tokens of a chat request's messages: each message's text plus 3 for its framing. */
export function promptTokensOf(messages: unknown): number {
  let n = 0;
  if (Array.isArray(messages)) for (const m of messages) n += countTokens(contentText((m as { content?: unknown })?.content)) + 3;
  return n;
}

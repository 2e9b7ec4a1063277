// The built-in models count tokens as words and single punctuation marks:
// deterministic, cheap, and close enough to real tokenizers for usage and
// rate-limit arithmetic to behave realistically.
const TOKEN = /[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;

export function countTokens(text: string): number {
  let n = 0;
  TOKEN.lastIndex = 0;
  while (TOKEN.exec(text) !== null) n++;
  return n;
}

/** Splits text into tokens that concatenate back to it (whitespace rides with the following token). */
export function tokenize(text: string): string[] {
  const out: string[] = [];
  let last = 0;
  TOKEN.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = TOKEN.exec(text)) !== null) {
    out.push(text.slice(last, m.index + m[0].length));
    last = m.index + m[0].length;
  }
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

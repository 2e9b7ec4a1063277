// Streams the lines of a stored file without loading it whole: chunks are cut
// at their last newline and decoded in one call, then split.
export interface Line {
  /** 1-based line number. */
  n: number;
  text: string;
}

export async function* readLines(stream: AsyncIterable<Uint8Array>): AsyncGenerator<Line[]> {
  let n = 0;
  for await (const text of textBlocks(stream)) {
    const out: Line[] = [];
    let start = 0;
    while (start < text.length) {
      let nl = text.indexOf("\n", start);
      if (nl === -1) nl = text.length;
      let stop = nl;
      if (stop > start && text.charCodeAt(stop - 1) === 13) stop--;
      out.push({ n: ++n, text: text.substring(start, stop) });
      start = nl + 1;
    }
    yield out;
  }
}

/**
 * The text of `chunks` a block of whole lines at a time (each ends with its
 * newline, but the last may lack it), a leading byte order mark dropped.
 * No chunk is kept past its turn: the bytes of a line cut by a chunk's end
 * are copied, so a reader may reuse its buffer (src/files/storedChunks.ts).
 */
export async function* textBlocks(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let carry: Uint8Array | null = null;
  let first = true;
  const text = (bytes: Uint8Array): string => {
    const t = decoder.decode(bytes);
    if (!first) return t;
    first = false;
    return t.charCodeAt(0) === 0xfeff ? t.slice(1) : t;
  };
  for await (const chunk of chunks) {
    let data = chunk;
    if (carry) {
      data = new Uint8Array(carry.length + chunk.length);
      data.set(carry, 0);
      data.set(chunk, carry.length);
      carry = null;
    }
    const lastNl = data.lastIndexOf(10);
    if (lastNl === -1) {
      carry = data === chunk ? chunk.slice() : data;
      continue;
    }
    if (lastNl + 1 < data.length) carry = data.slice(lastNl + 1);
    yield text(data.subarray(0, lastNl + 1));
  }
  if (carry) yield text(carry);
}

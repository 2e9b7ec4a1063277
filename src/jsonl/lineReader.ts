// Streams the lines of a stored file without loading it whole: chunks are cut
// at their last newline and decoded in one call, then split.
export interface Line {
  /** 1-based line number. */
  n: number;
  text: string;
}

export async function* readLines(stream: ReadableStream<Uint8Array>): AsyncGenerator<Line[]> {
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let carry: Uint8Array | null = null;
  let n = 0;
  let first = true;
  const split = (bytes: Uint8Array): Line[] => {
    let text = decoder.decode(bytes);
    if (first) {
      first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
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
    return out;
  };
  for await (const chunk of stream) {
    let data: Uint8Array = chunk;
    if (carry) {
      data = new Uint8Array(carry.length + chunk.length);
      data.set(carry, 0);
      data.set(chunk, carry.length);
      carry = null;
    }
    const lastNl = data.lastIndexOf(10);
    if (lastNl === -1) {
      carry = data;
      continue;
    }
    if (lastNl + 1 < data.length) carry = data.slice(lastNl + 1);
    yield split(data.subarray(0, lastNl + 1));
  }
  if (carry) yield split(carry);
}

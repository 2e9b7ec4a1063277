// What an interactive upstream call answers: the members of a fetch
// Response that offpeak reads (status, headers by name, the body as text or
// as a stream). fetch's Response has them; offpeak's own HTTP client
// (./upstream/httpClient.ts) answers with an OwnAnswer, a plain object.
//
// Why not a Response there too: a native Response (with its Headers) per
// call is a native wrapper for every garbage collection to visit. In the
// chat pass-through (bench/ab/proxy-ab.ts, alternating rounds of 3 s) the
// server's CPU a request was 57.4, 63.0 and 80.8 µs with plain objects
// against 66.1, 63.3 and 87.0 µs with a Response, in three runs: a few µs,
// on a noisy machine. The answer to the client is still a Response:
// Bun.serve needs one.

/** Reads headers by name, case-insensitively (a fetch Headers is one). */
export interface HeaderReader {
  get(name: string): string | null;
}

export interface UpstreamAnswer {
  readonly ok: boolean;
  readonly status: number;
  readonly headers: HeaderReader;
  /** The body as it arrives (read once: either this or text()). */
  readonly body: ReadableStream<Uint8Array> | null;
  /** The whole body as UTF-8 text; rejects if the body breaks off. */
  text(): Promise<string>;
}

const utf8 = new TextDecoder();

/** Header pairs as the upstream sent them, names lowercased. */
class PairHeaders implements HeaderReader {
  constructor(private readonly pairs: readonly (readonly [string, string])[]) {}

  get(name: string): string | null {
    const want = name.toLowerCase();
    let found: string | null = null;
    for (const [k, v] of this.pairs) if (k === want) found = found === null ? v : `${found}, ${v}`;
    return found;
  }
}

export class OwnAnswer implements UpstreamAnswer {
  private headerReader: PairHeaders | null = null;
  private stream: ReadableStream<Uint8Array> | null;

  /** `whole`: the body, all here already; else `stream`: the body as it comes; neither: no body. */
  constructor(
    readonly status: number,
    private readonly pairs: readonly (readonly [string, string])[],
    private whole: Uint8Array | null,
    stream: ReadableStream<Uint8Array> | null,
  ) {
    this.stream = stream;
  }

  get ok(): boolean {
    return this.status >= 200 && this.status <= 299;
  }

  get headers(): HeaderReader {
    return (this.headerReader ??= new PairHeaders(this.pairs));
  }

  get body(): ReadableStream<Uint8Array> | null {
    const whole = this.whole;
    if (whole) {
      this.whole = null;
      this.stream = new ReadableStream<Uint8Array>({
        start(c) {
          if (whole.length > 0) c.enqueue(whole);
          c.close();
        },
      });
    }
    return this.stream;
  }

  text(): Promise<string> {
    const whole = this.whole;
    if (whole) {
      this.whole = null;
      return Promise.resolve(utf8.decode(whole));
    }
    const stream = this.stream;
    if (!stream) return Promise.resolve("");
    this.stream = null;
    return readText(stream);
  }

  /** For callers (tests) that want the parsed body. */
  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }
}

async function readText(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
  }
}

// A streaming multipart/form-data reader. Bun's request.formData() buffers
// the whole body; an 8 GB upload must instead flow to disk chunk by chunk, so
// this walks the body once, finding boundaries with Buffer.indexOf (native),
// and hands each part's bytes to a sink as they arrive.
import { ApiError } from "../errors";

export interface PartInfo {
  name: string;
  filename: string | null;
  contentType: string | null;
}

export interface PartSink {
  write(chunk: Uint8Array): void | Promise<void>;
  end(): void | Promise<void>;
}

const MAX_HEADER_BYTES = 16 * 1024;
const CRLF = Buffer.from("\r\n");
const HEADER_END = Buffer.from("\r\n\r\n");

export function boundaryOf(contentType: string | null): string {
  if (!contentType || !/^multipart\/form-data\s*;/i.test(contentType))
    throw new ApiError("invalid_value", "Content-Type must be multipart/form-data with a boundary", { param: "content-type" });
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary || boundary.length > 200) throw new ApiError("invalid_value", "multipart boundary is missing or too long", { param: "content-type" });
  return boundary;
}

const malformed = (why: string) => new ApiError("invalid_value", `malformed multipart body: ${why}`, { param: null });

function decodeFilenameStar(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw malformed("filename* is not valid percent-encoded UTF-8");
  }
}

/**
 * Browsers, undici and Bun (so the openai SDK) write `"`, CR and LF in a
 * quoted multipart filename as %22, %0D and %0A (the HTML standard's
 * multipart/form-data encoding, which escapes nothing else); a file sent as
 * `a"b.txt` must keep that name.
 */
function unescapeQuoted(name: string): string {
  return name.replace(/%(22|0d|0a)/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

function parseHeaders(block: string): PartInfo {
  let name: string | null = null;
  let filename: string | null = null;
  let contentType: string | null = null;
  for (const line of block.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const key = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (key === "content-disposition") {
      name = /;\s*name="([^"]*)"/i.exec(value)?.[1] ?? /;\s*name=([^;\s]+)/i.exec(value)?.[1] ?? null;
      const fnStar = /;\s*filename\*=(?:UTF-8|utf-8)''([^;]+)/.exec(value)?.[1];
      const quoted = /;\s*filename="([^"]*)"/i.exec(value)?.[1];
      filename = fnStar ? decodeFilenameStar(fnStar) : quoted !== undefined ? unescapeQuoted(quoted) : (/;\s*filename=([^;\s]+)/i.exec(value)?.[1] ?? null);
    } else if (key === "content-type") contentType = value;
  }
  if (name === null) throw malformed("a part has no Content-Disposition name");
  return { name, filename, contentType };
}

/** Where the body's chunks come from: a stream, or a reader the caller owns (an upload's IdleReader). */
export interface ChunkReader {
  read(): Promise<{ done: false; value: Uint8Array } | { done: true; value?: Uint8Array }>;
}

/**
 * Reads `body` as multipart with `boundary`; for each part calls `onPart`,
 * whose sink receives the part's bytes. Resolves when the closing boundary
 * has been read.
 */
export async function readMultipart(
  body: ReadableStream<Uint8Array> | ChunkReader,
  boundary: string,
  onPart: (info: PartInfo) => PartSink,
): Promise<void> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  const ownReader = body instanceof ReadableStream ? body.getReader() : null;
  const reader: ChunkReader = ownReader ?? (body as ChunkReader);
  // The first boundary may come without its leading CRLF; pretend it had one.
  let buf: Buffer = Buffer.from(CRLF);
  let state: "preamble" | "after-boundary" | "headers" | "body" | "done" = "preamble";
  let sink: PartSink | null = null;
  let eof = false;

  /** The next chunk of the body (no copy), or null at its end. */
  const nextChunk = async (): Promise<Buffer | null> => {
    if (eof) return null;
    const { value, done } = await reader.read();
    if (done) {
      eof = true;
      return null;
    }
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  };

  const more = async (): Promise<boolean> => {
    const chunk = await nextChunk();
    if (!chunk) return false;
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    return true;
  };

  /**
   * `more` for the body state, without copying the new chunk: the few bytes
   * left over (shorter than the delimiter) are body unless a delimiter starts
   * among them, which only a small joint of them and the chunk's head can
   * show. If none starts there, they go to the sink and the chunk becomes the
   * buffer as it is; otherwise (once per part) fall back to joining.
   */
  const moreBody = async (): Promise<boolean> => {
    const chunk = await nextChunk();
    if (!chunk) return false;
    if (buf.length > 0) {
      const joint = Buffer.concat([buf, chunk.subarray(0, delimiter.length)]);
      const at = joint.indexOf(delimiter);
      if (at !== -1 && at < buf.length) {
        buf = Buffer.concat([buf, chunk]);
        return true;
      }
      if (at === -1 && joint.length < buf.length + delimiter.length) {
        // The chunk is shorter than a delimiter: too little to decide; join (small).
        buf = Buffer.concat([buf, chunk]);
        return true;
      }
      await sink!.write(buf);
    }
    buf = chunk;
    return true;
  };

  try {
    while (state !== "done") {
      if (state === "preamble") {
        const i = buf.indexOf(delimiter);
        if (i === -1) {
          if (buf.length > MAX_HEADER_BYTES) throw malformed("no opening boundary");
          if (!(await more())) throw malformed("no opening boundary");
          continue;
        }
        buf = buf.subarray(i + delimiter.length);
        state = "after-boundary";
      } else if (state === "after-boundary") {
        if (buf.length < 2) {
          if (!(await more())) throw malformed("truncated after a boundary");
          continue;
        }
        if (buf[0] === 45 && buf[1] === 45) {
          state = "done"; // "--": the closing boundary
        } else {
          // Transport padding (spaces/tabs) may precede the CRLF.
          const crlf = buf.indexOf(CRLF);
          if (crlf === -1) {
            if (buf.length > 256 || !(await more())) throw malformed("bad boundary line");
            continue;
          }
          buf = buf.subarray(crlf + 2);
          state = "headers";
        }
      } else if (state === "headers") {
        const end = buf.indexOf(HEADER_END);
        if (end === -1) {
          if (buf.length > MAX_HEADER_BYTES) throw malformed("part headers too large");
          if (!(await more())) throw malformed("truncated part headers");
          continue;
        }
        sink = onPart(parseHeaders(buf.subarray(0, end).toString("utf8")));
        buf = buf.subarray(end + 4);
        state = "body";
      } else {
        const i = buf.indexOf(delimiter);
        if (i !== -1) {
          if (i > 0) await sink!.write(buf.subarray(0, i));
          await sink!.end();
          sink = null;
          buf = buf.subarray(i + delimiter.length);
          state = "after-boundary";
          continue;
        }
        // Everything but a possible partial delimiter at the end is body.
        const safe = buf.length - (delimiter.length - 1);
        if (safe > 0) {
          await sink!.write(buf.subarray(0, safe));
          buf = buf.subarray(safe);
        }
        if (!(await moreBody())) throw malformed("truncated body: no closing boundary");
      }
    }
  } finally {
    // Whatever follows the closing boundary (epilogue) is ignored; stop reading.
    ownReader?.releaseLock();
  }
}

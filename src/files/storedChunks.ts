// A stored file's bytes read on the main thread, chunk after chunk, without
// a new buffer for each: where the bytes lie on the local disk (a plain
// file, or a composed file's parts) they are read into one buffer used
// over and over. Read as a stream, each chunk is a buffer of its own, dead
// as soon as it is looked at but left for the collector, which does not
// count it as the heap's: reading faster than they were collected let an
// Upload's completion (src/uploads/complete.ts) or a message batch's
// results (src/anthropic/batches/results.ts) hold hundreds of MB of them
// (docs/CONTRACT.md §22: memory stays flat whatever the file's size). In a
// bucket the bytes are streamed, with a collection asked for every
// COLLECT_EVERY_BYTES.
import { open } from "node:fs/promises";
import type { BlobLocator } from "../storage/blobStore";

/** Bytes read into the one buffer at a time. */
const READ_BYTES = 1 << 20;
/** Bytes streamed from a bucket between two requests for a collection. */
const COLLECT_EVERY_BYTES = 64 << 20;

/**
 * The bytes at `loc` in order. Each chunk is good only until the next is
 * asked for: a caller that keeps bytes copies them. `stream`: the same bytes
 * as a stream, for a file that is not on the local disk.
 */
export async function* storedChunks(loc: BlobLocator, stream: () => ReadableStream<Uint8Array> | Promise<ReadableStream<Uint8Array>>): AsyncGenerator<Uint8Array> {
  const paths = "path" in loc ? [{ path: loc.path, bytes: null }] : "parts" in loc && loc.parts.every((p) => "path" in p) ? (loc.parts as { path: string; bytes: number }[]) : null;
  if (!paths) {
    let since = 0;
    for await (const chunk of await stream()) {
      yield chunk;
      if ((since += chunk.length) >= COLLECT_EVERY_BYTES) {
        since = 0;
        Bun.gc(false);
      }
    }
    return;
  }
  // A plain Uint8Array, not a Buffer: a caller's slice() of a chunk must be a copy (a Buffer's is a view).
  const buf = new Uint8Array(READ_BYTES);
  for (const p of paths) {
    const fh = await open(p.path, "r");
    try {
      // A part is read to its recorded length; a plain file to its end.
      for (let at = 0; p.bytes === null || at < p.bytes; ) {
        const { bytesRead } = await fh.read(buf, 0, p.bytes === null ? buf.length : Math.min(buf.length, p.bytes - at), at);
        if (bytesRead === 0) {
          if (p.bytes === null) break;
          throw new Error(`a part of a composed file is shorter than recorded (${at} of ${p.bytes} bytes)`);
        }
        at += bytesRead;
        yield buf.subarray(0, bytesRead);
      }
    } finally {
      await fh.close();
    }
  }
}

// Download bodies that Bun sends with a Content-Length (docs/CONTRACT.md §17: whichever
// node and whichever storage serves a download).
//
// Bun 1.4.5 drops a Content-Length that a handler sets on a ReadableStream
// body and frames it chunked (oven-sh/bun#10507, checked on a raw socket:
// a plain stream, a "direct" or "bytes" stream, an async generator, a
// stream of an S3 object and a fetch() answer's body all lose it). It keeps
// the length only for bodies it holds whole (bytes, a Blob) or reads itself
// from a regular file (Bun.file, a slice of one: sendfile). So a body that
// is a stream (an object in the bucket, or bytes that span a composed
// file's parts) is read first:
//
// - up to IN_MEMORY_BYTES, into memory;
// - beyond, into a spool file under <data_dir>/downloads, which Bun then
//   sends with sendfile. Bun opens the file when it renders the answer (in
//   the same turn as the handler's promise settles); the name is removed
//   SPOOL_KEEP_MS later, and the open file lives on until Bun is done with
//   it. Leftovers of a crash are removed at the next first use.
//
// The cost: the answer's head waits until its bytes are here (a download
// from the bucket starts once the node has fetched it: about the time a
// client would take anyway on a fast link), and the spool takes disk space
// for the while. In exchange a download is never cut: the bytes are fetched
// with retries (./retry.ts) before anything is answered, and a failure
// there is a clean error answer, not a body that stops.
import { mkdirSync, readdirSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { diskBlob } from "./diskBlob";
import { trashIn } from "./trash";

const MiB = 1 << 20;
export const IN_MEMORY_BYTES = 8 * MiB;
const SPOOL_KEEP_MS = 10_000;

let seq = 0;
const swept = new Set<string>();

/**
 * `body` (exactly `bytes` long) as a Response body that Bun sends with
 * Content-Length: a Blob as it is, a stream read into memory or a spool
 * file. Throws if the stream is not `bytes` long.
 */
export async function withLength(
  body: Blob | ReadableStream<Uint8Array>,
  bytes: number,
  dataDir: string,
  /** The spool's folder under dataDir: one per thread that spools (each sweeps its own at first use). */
  spool = "downloads",
): Promise<Blob | Uint8Array<ArrayBuffer>> {
  if (body instanceof Blob) return body;
  if (bytes <= IN_MEMORY_BYTES) {
    const out = new Uint8Array(bytes);
    let at = 0;
    for await (const chunk of body) {
      if (at + chunk.length > bytes) throw new Error(`a stored body is longer than recorded (over ${bytes} bytes)`);
      out.set(chunk, at);
      at += chunk.length;
    }
    if (at !== bytes) throw new Error(`a stored body is shorter than recorded (${at} of ${bytes} bytes)`);
    return out;
  }
  const dir = join(dataDir, spool);
  const trash = trashIn(dataDir);
  if (!swept.has(dir)) {
    swept.add(dir);
    mkdirSync(dir, { recursive: true });
    for (const name of readdirSync(dir)) trash.discard(join(dir, name));
  }
  const path = join(dir, `${process.pid}.${Date.now()}.${seq++}`);
  const fh = await open(path, "w");
  let at = 0;
  try {
    for await (const chunk of body) {
      if (at + chunk.length > bytes) throw new Error(`a stored body is longer than recorded (over ${bytes} bytes)`);
      for (let off = 0; off < chunk.length; ) off += (await fh.write(chunk, off, chunk.length - off, at + off)).bytesWritten;
      at += chunk.length;
    }
    if (at !== bytes) throw new Error(`a stored body is shorter than recorded (${at} of ${bytes} bytes)`);
  } catch (e) {
    await fh.close().catch(() => {});
    trash.discard(path);
    throw e;
  }
  await fh.close();
  setTimeout(() => trash.discard(path), SPOOL_KEEP_MS).unref();
  return diskBlob(path);
}

// Where a blob's bytes are, in a form any thread can open by itself: a local
// path, or an object in an S3-compatible bucket with the settings to reach
// it. Batch Workers get locators (never a path they must share with the
// store), so they read their shard of the input straight from the disk or
// the bucket, and upload their finished part files to the bucket, without
// the main thread moving a byte.
import { bucketOf, type LazyBlob } from "./bucket";
import { readParts } from "./composed";

/** Everything Bun's S3 client needs to reach the bucket: resolved once in src/config.ts, never read from the environment by a Worker. */
export interface S3Settings {
  bucket: string;
  endpoint?: string;
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  sessionToken?: string;
}

export type S3Locator = { s3: S3Settings; key: string };
/** A composed blob (a File made of an Upload's parts): its parts' bytes in order, each where it lies. */
export type ComposedLocator = { parts: (({ path: string } | S3Locator) & { bytes: number })[] };
export type BlobLocator = { path: string } | S3Locator | ComposedLocator;

/**
 * The blob at `loc`, read lazily: slice() it for a byte range, stream() it.
 * An object's reads go through ./bucket.ts (retried, streams resumed).
 * Never a Response body (an S3File as one is answered with a redirect to a
 * presigned URL).
 */
export function openLocator(loc: BlobLocator): LazyBlob {
  if ("parts" in loc) return new ComposedBlob(loc, 0, loc.parts.reduce((n, p) => n + p.bytes, 0));
  return "path" in loc ? Bun.file(loc.path) : bucketOf(loc.s3).blob(loc.key);
}

/** Bytes [start, end) of a composed blob, read part after part (./composed.ts): what a batch Worker slices its shard from. */
class ComposedBlob implements LazyBlob {
  constructor(
    private readonly loc: ComposedLocator,
    private readonly start: number,
    private readonly end: number,
  ) {}

  slice(start = 0, end?: number): LazyBlob {
    const from = Math.min(this.end, this.start + Math.max(0, start));
    const to = end === undefined ? this.end : Math.min(this.end, Math.max(from, this.start + Math.max(0, end)));
    return new ComposedBlob(this.loc, from, to);
  }

  stream(): ReadableStream<Uint8Array> {
    const parts = this.loc.parts.map((p, i) => ({ key: String(i), bytes: p.bytes }));
    const body = readParts(parts, this.start, this.end, (p) => openLocator(this.loc.parts[Number(p.key)]!));
    return body instanceof ReadableStream ? body : body.stream();
  }

  arrayBuffer(): Promise<ArrayBuffer> {
    return new Response(this.stream()).arrayBuffer();
  }
}

/**
 * Bytes [start, end) of the blob at `loc`, as a locator and a range within
 * it: a composed blob keeps only the parts the range touches (a batch
 * shard's Worker is sent the few parts of its 4 MB, not all of them).
 */
export function narrowLocator(loc: BlobLocator, start: number, end: number): { input: BlobLocator; start: number; end: number } {
  if (!("parts" in loc)) return { input: loc, start, end };
  const parts: ComposedLocator["parts"] = [];
  let at = 0;
  let first = -1;
  for (const p of loc.parts) {
    if (at + p.bytes > start && at < end) {
      if (first < 0) first = at;
      parts.push(p);
    }
    at += p.bytes;
  }
  if (first < 0) return { input: { parts: [] }, start: 0, end: 0 };
  return { input: { parts }, start: start - first, end: end - first };
}

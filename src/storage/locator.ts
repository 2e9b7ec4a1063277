// Where a blob's bytes are, in a form any thread can open by itself: a local
// path, or an object in an S3-compatible bucket with the settings to reach
// it. Batch Workers get locators (never a path they must share with the
// store), so they read their shard of the input straight from the disk or
// the bucket, and upload their finished part files to the bucket, without
// the main thread moving a byte.
import { bucketOf, type LazyBlob } from "./bucket";

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
export type BlobLocator = { path: string } | S3Locator;

/**
 * The blob at `loc`, read lazily: slice() it for a byte range, stream() it.
 * An object's reads go through ./bucket.ts (retried, streams resumed).
 * Never a Response body (an S3File as one is answered with a redirect to a
 * presigned URL).
 */
export function openLocator(loc: BlobLocator): LazyBlob {
  return "path" in loc ? Bun.file(loc.path) : bucketOf(loc.s3).blob(loc.key);
}

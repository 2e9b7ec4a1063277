// Where a blob's bytes are, in a form any thread can open by itself: a local
// path, or an object in an S3-compatible bucket with the settings to reach
// it. Batch Workers get locators (never a path they must share with the
// store), so they read their shard of the input straight from the disk or
// the bucket, and upload their finished part files to the bucket, without
// the main thread moving a byte.
import type { S3File } from "bun";

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

/** One client per distinct settings, per thread. */
const clients = new Map<string, Bun.S3Client>();

export function s3ClientOf(settings: S3Settings): Bun.S3Client {
  const id = JSON.stringify(settings);
  let c = clients.get(id);
  if (!c) clients.set(id, (c = new Bun.S3Client({ ...settings })));
  return c;
}

export function s3FileOf(loc: S3Locator): S3File {
  return s3ClientOf(loc.s3).file(loc.key);
}

/**
 * The blob at `loc`, read lazily: slice() it for a byte range, stream() it.
 * (An S3File must never be a Response body: Bun answers that with a
 * redirect to a presigned URL.)
 */
export function openLocator(loc: BlobLocator): Blob {
  return "path" in loc ? Bun.file(loc.path) : s3FileOf(loc);
}

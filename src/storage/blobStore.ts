// File bytes go only through this interface, so a shared object store (S3 via
// Bun.s3) can replace the local disk later without touching the services.
export interface BlobWriter {
  /** Bytes written so far. */
  readonly bytes: number;
  write(chunk: Uint8Array): void;
  /** No more writes will come: start making the bytes durable now, so that commit() waits less (a hint; optional). */
  finish?(): void;
  /** Streams back what has been written so far (before commit). */
  readBack(): ReadableStream<Uint8Array>;
  /** Makes the blob visible under its key, durably: resolves only once its bytes and its name are on disk (fsynced). */
  commit(): Promise<void>;
  /** Removes everything written; safe to call more than once. */
  abort(): void;
}

/** One part of a composed blob: a blob of its own under `key`, `bytes` long (never 0). */
export interface BlobPart {
  key: string;
  bytes: number;
}

/*
 * Composed blobs: a blob whose bytes are its parts' bytes in order (a
 * batch's output and error files, one part per shard). The list of parts is
 * kept by the caller (the file_parts table); the store keeps the part blobs,
 * under keys it chooses. Composing moves no bytes, on a local disk (a rename
 * of the part file into the store) as on an object store (the object stays
 * where its writer uploaded it, or is one of a multipart upload's parts).
 */
export interface BlobStore {
  createWriter(key: string): BlobWriter;
  /** A lazily read blob (Bun.file) — slice() it for ranges, stream() it for content. */
  open(key: string): Blob;
  size(key: string): number | null;
  /**
   * Removes the blob under `key` and, if it is composed, every part of it.
   * The key is free when this returns; the bytes are removed off the calling
   * thread (a multi-GB file or thousands of parts must not stall requests).
   */
  delete(key: string): void;
  /**
   * Takes a finished staged file (a batch shard's part file, written by a
   * Worker at a local path) into the store as part `idx` of the composed
   * blob `key`, without copying its bytes: on disk a rename into the blob's
   * part directory; an object store keeps the object where it was written
   * and only names it. Idempotent: after a crash, a part already taken is
   * found where it went. null: nothing to take (no staged file, or an empty
   * one: empty parts are not kept).
   */
  adoptPart(key: string, idx: number, staged: string): Promise<BlobPart | null>;
  /** Makes the parts taken so far for `key` durable (on disk: fsync of the directories that gained entries). */
  syncParts(key: string): Promise<void>;
  /**
   * Bytes [start, end) of a composed blob whose parts are `parts`, in order:
   * a lazily read Blob when they lie in one part (served natively, with
   * Content-Length), else one stream across the parts (see ./composed.ts).
   */
  readComposed(parts: readonly BlobPart[], start: number, end: number): Blob | ReadableStream<Uint8Array>;
  /** Local path for readers that stream in Workers. */
  pathOf(key: string): string;
  freeBytes(): number | null;
  /** At start: removes temporary files left by a crash mid-upload, and deletions a crash interrupted (in the background). */
  sweepTemporary(): void;
}

// File bytes go only through this interface: the local disk (./localDisk.ts)
// or an S3-compatible bucket (./s3.ts), chosen by storage.url, without the
// services knowing which.
import type { LazyBlob } from "./bucket";
import type { BlobLocator, S3Locator } from "./locator";

export type { BlobLocator };

export interface BlobWriter {
  /** Bytes written so far. */
  readonly bytes: number;
  /**
   * Takes the chunk (copied or written before this returns: the caller may
   * reuse its buffer). A promise: wait for it before writing more (the bytes
   * ahead of it are still being sent: memory stays bounded). It never
   * rejects: a failure shows at the next write() or at commit().
   */
  write(chunk: Uint8Array): void | Promise<void>;
  /** No more writes will come: start making the bytes durable now, so that commit() waits less (a hint; optional). */
  finish?(): void;
  /** Streams back what has been written so far (before commit). */
  readBack(): ReadableStream<Uint8Array>;
  /** Makes the blob visible under its key, durably: resolves only once its bytes and its name are on disk (fsynced), or once the bucket answered the upload's completion. */
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
  /** A lazily read blob (Bun.file, an object of the bucket: ./bucket.ts) — slice() it for ranges, stream() it for content; never a Response body (see read()). */
  open(key: string): LazyBlob;
  /**
   * The blob, or its bytes [start, end), as a Response body: on disk a lazily read
   * file Blob (Bun sends it natively, with Content-Length); on S3 a stream
   * through this node that resumes where a bucket error cut it (an S3File
   * as a body would answer with a redirect to a presigned URL, which
   * clients of a cluster may not be able to follow). A download gives a
   * stream its Content-Length with ./sized.ts.
   */
  read(key: string, range?: { start: number; end: number }): Blob | ReadableStream<Uint8Array>;
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
   * part directory; an object store keeps the object where the Worker
   * uploaded it (partTarget) and only checks it, uploading the staged file
   * only if the Worker's upload is missing. Idempotent: after a crash, a
   * part already taken is found where it went. null: nothing to take (no
   * staged file, or an empty one: empty parts are not kept).
   */
  adoptPart(key: string, idx: number, staged: string, claim: number): Promise<BlobPart | null>;
  /**
   * Where the Worker of run `claim` of shard `idx` puts the part of the
   * composed blob `key` itself once the part is finished (an object in the
   * bucket, named for the run), and where it checkpoints the part while it
   * runs; or null: the part stays where it was written until adoptPart
   * takes it (local disk).
   */
  partTarget(key: string, idx: number, claim: number): PartTarget | null;
  /** Makes the parts taken so far for `key` durable (on disk: fsync of the directories that gained entries). */
  syncParts(key: string): Promise<void>;
  /**
   * Bytes [start, end) of a composed blob whose parts are `parts`, in order:
   * a lazily read Blob when they lie in one part (served natively, with
   * Content-Length), else one stream across the parts (see ./composed.ts).
   */
  readComposed(parts: readonly BlobPart[], start: number, end: number): Blob | ReadableStream<Uint8Array>;
  /** Where the blob is, for readers in other threads (batch Workers open it themselves: openLocator). */
  locate(key: string): BlobLocator;
  /** Where a composed blob's parts are, in order, as one locator (a batch whose input is a File made of an Upload's parts). */
  locateComposed(parts: readonly BlobPart[]): BlobLocator;
  /**
   * A writer for a part of the composed blob `key` that arrives on its own
   * (an Upload's part, src/uploads/), named `name`: committed under
   * `partKey`, beside the blob's other parts, so that delete(key) removes it
   * with them and delete(partKey) removes it alone.
   */
  createPartWriter(key: string, name: string): { partKey: string; writer: BlobWriter };
  /** Free bytes where blobs are stored; null when unknown (an object store has no such limit). */
  freeBytes(): number | null;
  /** Whether the store answers (GET /status): the disk has room information; the bucket answers a listing. */
  probe(): Promise<boolean>;
  /** At start: removes temporary files left by a crash mid-upload, and deletions a crash interrupted (in the background). */
  sweepTemporary(): void;
  /** Waits for background work (removals, aborted uploads) started so far: a clean stop. */
  settled(): Promise<void>;
}

/** A running shard's part in a bucket: its final object (named for the run) and the prefix of its checkpoints (../batches/worker/checkpoints.ts). */
export interface PartTarget {
  object: S3Locator;
  checkpoints: S3Locator;
}

// File bytes go only through this interface, so a shared object store (S3 via
// Bun.s3) can replace the local disk later without touching the services.
export interface BlobWriter {
  /** Bytes written so far. */
  readonly bytes: number;
  write(chunk: Uint8Array): void;
  /** Streams back what has been written so far (before commit). */
  readBack(): ReadableStream<Uint8Array>;
  /** Makes the blob visible under its key, durably: resolves only once its bytes and its name are on disk (fsynced). */
  commit(): Promise<void>;
  /** Removes everything written; safe to call more than once. */
  abort(): void;
}

export interface BlobStore {
  createWriter(key: string): BlobWriter;
  /** A lazily read blob (Bun.file) — slice() it for ranges, stream() it for content. */
  open(key: string): Blob;
  size(key: string): number | null;
  delete(key: string): void;
  /** Local path for readers that stream in Workers. */
  pathOf(key: string): string;
  freeBytes(): number | null;
  /** Removes temporary files left by a crash mid-upload. */
  sweepTemporary(): void;
}

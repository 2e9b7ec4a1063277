import { closeSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync, statfsSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { BlobStore, BlobWriter } from "./blobStore";

/**
 * Blobs as plain files under `<dataDir>/files`. A writer fills
 * `<dataDir>/tmp/<key>.part` and renames it into place on commit, so a
 * half-written upload is never visible and a crash leaves only a temp file,
 * which the next start removes.
 */
export class LocalDiskStore implements BlobStore {
  private readonly dir: string;
  private readonly tmp: string;

  constructor(dataDir: string) {
    this.dir = join(dataDir, "files");
    this.tmp = join(dataDir, "tmp");
    mkdirSync(this.dir, { recursive: true });
    mkdirSync(this.tmp, { recursive: true });
  }

  pathOf(key: string): string {
    return join(this.dir, key);
  }

  createWriter(key: string): BlobWriter {
    const tmpPath = join(this.tmp, `${key}.part`);
    const finalPath = this.pathOf(key);
    let fd: number | null = openSync(tmpPath, "w", 0o600);
    let bytes = 0;
    return {
      get bytes() {
        return bytes;
      },
      write(chunk: Uint8Array) {
        // Synchronous writes land in the page cache at memory speed and keep
        // memory bounded: nothing queues behind a slow disk.
        let off = 0;
        while (off < chunk.length) off += writeSync(fd!, chunk, off, chunk.length - off);
        bytes += chunk.length;
      },
      readBack() {
        return Bun.file(tmpPath).stream();
      },
      async commit() {
        // No fsync: the bytes survive a process crash (they are in the page
        // cache); only an OS crash could lose the newest upload, and an fsync
        // of a 280 MB file costs more than the whole upload.
        closeSync(fd!);
        fd = null;
        renameSync(tmpPath, finalPath);
      },
      abort() {
        if (fd !== null) {
          closeSync(fd);
          fd = null;
        }
        rmSync(tmpPath, { force: true });
      },
    };
  }

  open(key: string): Blob {
    return Bun.file(this.pathOf(key));
  }

  size(key: string): number | null {
    try {
      return statSync(this.pathOf(key)).size;
    } catch {
      return null;
    }
  }

  delete(key: string): void {
    rmSync(this.pathOf(key), { force: true });
  }

  freeBytes(): number | null {
    try {
      const s = statfsSync(this.dir);
      return s.bavail * s.bsize;
    } catch {
      return null;
    }
  }

  sweepTemporary(): void {
    for (const name of readdirSync(this.tmp)) rmSync(join(this.tmp, name), { force: true });
  }
}

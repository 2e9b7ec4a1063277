import { closeSync, mkdirSync, openSync, readdirSync, rmSync, statSync, statfsSync, writeSync } from "node:fs";
import { rename } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fsyncEnabled, noteDurable, syncDir, syncDirNow, syncFd } from "../fsync";
import type { BlobLocator, BlobPart, BlobStore, BlobWriter } from "./blobStore";
import { mkdir as mkdirAsync, rename as renameAsync, stat as statAsync } from "node:fs/promises";
import { readParts } from "./composed";
import { diskBlob, sliceOf } from "./diskBlob";
import { trashIn, type Trash } from "./trash";

/** An upload is flushed to disk every this many bytes while it streams (see createWriter). */
const SYNC_EVERY = 16 * 1024 * 1024;

/**
 * Blobs as plain files under `<dataDir>/files`. A writer fills
 * `<dataDir>/tmp/<key>.part` and renames it into place on commit, so a
 * half-written upload is never visible and a crash leaves only a temp file,
 * which the next start removes.
 */
export class LocalDiskStore implements BlobStore {
  private readonly dir: string;
  private readonly tmp: string;
  private readonly trash: Trash;

  constructor(dataDir: string) {
    this.dir = join(dataDir, "files");
    this.tmp = join(dataDir, "tmp");
    mkdirSync(this.dir, { recursive: true });
    mkdirSync(this.tmp, { recursive: true });
    this.trash = trashIn(dataDir);
    // The directories' own entries, once at start: a commit fsyncs files/ only.
    syncDirNow(dataDir);
    syncDirNow(dirname(dataDir));
  }

  pathOf(key: string): string {
    return join(this.dir, key);
  }

  locate(key: string): BlobLocator {
    return { path: this.pathOf(key) };
  }

  createWriter(key: string): BlobWriter {
    return this.writerAt(join(this.tmp, `${key}.part`), this.pathOf(key), [this.dir]);
  }

  createPartWriter(key: string, name: string): { partKey: string; writer: BlobWriter } {
    const partKey = `${key}.parts/${name}`;
    // The parts directory is made now: the writer renames into it at commit.
    // Its entry in files/ is fsynced with each part's (a no-op once it is there).
    mkdirSync(this.partsDir(key), { recursive: true, mode: 0o700 });
    return { partKey, writer: this.writerAt(join(this.tmp, `${key}.parts.${name}.part`), this.pathOf(partKey), [this.partsDir(key), this.dir]) };
  }

  /** A writer that fills `tmpPath` and, at commit, renames it to `finalPath` and fsyncs `dirs` (the new name's directory first). */
  private writerAt(tmpPath: string, finalPath: string, dirs: string[]): BlobWriter {
    let fd: number | null = openSync(tmpPath, "w", 0o600);
    let bytes = 0;
    // Durable before acknowledged (docs/OPERATING.md): the bytes are flushed
    // while they stream in, one fdatasync at a time on the thread pool, each
    // covering everything written before it began, so the flush at commit
    // covers at most the last SYNC_EVERY bytes plus what arrived during the
    // last flush; after finish() the tail is flushed at once (while the
    // caller still validates), and commit() only waits for it.
    let flushing: Promise<void> | null = null;
    let flushError: unknown = null;
    let nextSyncAt = SYNC_EVERY;
    let flushedUpTo = 0;
    let finished = false;
    const startFlush = (f: number) => {
      const upTo = bytes;
      flushing = syncFd(f, tmpPath, upTo)
        .then(
          () => void (flushedUpTo = upTo),
          (e) => void (flushError ??= e),
        )
        .finally(() => {
          flushing = null;
          // The tail that came in during this flush, once no more is coming.
          if (finished && fd === f && flushError === null && flushedUpTo < bytes) startFlush(f);
        });
    };
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
        if (bytes >= nextSyncAt && flushing === null && fsyncEnabled()) {
          nextSyncAt = bytes + SYNC_EVERY;
          startFlush(fd!);
        }
      },
      finish() {
        finished = true;
        if (fd !== null && flushing === null && fsyncEnabled() && flushedUpTo < bytes) startFlush(fd);
      },
      readBack() {
        return Bun.file(tmpPath).stream();
      },
      async commit() {
        // file fdatasync → close → rename → fsync of the directory: only then
        // does the caller write the record and answer.
        while (flushing) await flushing;
        if (flushError) throw flushError;
        // Skipped if a flush that began after the last write already covers it all.
        if (flushedUpTo < bytes) await syncFd(fd!, tmpPath, bytes);
        closeSync(fd!);
        fd = null;
        await rename(tmpPath, finalPath);
        noteDurable("rename", finalPath, { bytes });
        try {
          for (const dir of dirs) await syncDir(dir);
        } catch (e) {
          // Not known to be durable: not stored (abort() only removes the temp file).
          rmSync(finalPath, { force: true });
          throw e;
        }
      },
      abort() {
        const f = fd;
        fd = null;
        // A flush in flight still uses the descriptor: close it after.
        if (f !== null) {
          if (flushing) void flushing.finally(() => closeSync(f));
          else closeSync(f);
        }
        rmSync(tmpPath, { force: true });
      },
    };
  }

  open(key: string): Blob {
    return diskBlob(this.pathOf(key));
  }

  read(key: string, range?: { start: number; end: number }): Blob {
    const blob = diskBlob(this.pathOf(key));
    return range ? sliceOf(blob, range.start, range.end) : blob;
  }

  size(key: string): number | null {
    try {
      return statSync(this.pathOf(key)).size;
    } catch {
      return null;
    }
  }

  /** A composed blob's parts live in `files/<key>.parts/<idx>`. */
  private partsDir(key: string): string {
    return this.pathOf(`${key}.parts`);
  }

  delete(key: string): void {
    // Renamed into the trash now, removed on the thread pool (./trash.ts).
    this.trash.discard(this.pathOf(key));
    this.trash.discard(this.partsDir(key));
  }

  async adoptPart(key: string, idx: number, staged: string): Promise<BlobPart | null> {
    const partKey = `${key}.parts/${idx}`;
    const dest = this.pathOf(partKey);
    const size = await sizeOrNull(staged);
    if (size !== null && size > 0) {
      await mkdirAsync(this.partsDir(key), { recursive: true });
      await renameAsync(staged, dest);
      return { key: partKey, bytes: size };
    }
    // Taken by an earlier run that a crash interrupted (or empty: not kept).
    const taken = await sizeOrNull(dest);
    return taken ? { key: partKey, bytes: taken } : null;
  }

  partTarget(_key: string, _idx: number, _claim: number): null {
    // A part file is renamed into the store at finalize: it never moves through a Worker.
    return null;
  }

  async syncParts(key: string): Promise<void> {
    const dir = this.partsDir(key);
    if ((await sizeOrNull(dir)) === null) return;
    // The parts' names in their directory, and the directory's name in files/.
    // (Their bytes were flushed by the Worker that wrote them.)
    await syncDir(dir);
    await syncDir(this.dir);
  }

  locateComposed(parts: readonly BlobPart[]): BlobLocator {
    return { parts: parts.map((p) => ({ path: this.pathOf(p.key), bytes: p.bytes })) };
  }

  readComposed(parts: readonly BlobPart[], start: number, end: number): Blob | ReadableStream<Uint8Array> {
    return readParts(parts, start, end, (p) => diskBlob(this.pathOf(p.key)));
  }

  freeBytes(): number | null {
    try {
      const s = statfsSync(this.dir);
      return s.bavail * s.bsize;
    } catch {
      return null;
    }
  }

  async probe(): Promise<boolean> {
    return this.freeBytes() !== null;
  }

  settled(): Promise<void> {
    return this.trash.settled();
  }

  sweepTemporary(): void {
    // Into the trash (a rename each), removed in the background: a crash
    // mid-upload may have left a multi-GB temp file.
    this.trash.emptyAtStart();
    for (const name of readdirSync(this.tmp)) this.trash.discard(join(this.tmp, name));
  }
}

async function sizeOrNull(path: string): Promise<number | null> {
  try {
    return (await statAsync(path)).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
}

// Blobs as objects in an S3-compatible bucket (storage.url = s3://BUCKET[/PREFIX]),
// through Bun's built-in S3 client. A blob `key` is the object
// `PREFIX/key`; part `idx` of a composed blob is the object
// `PREFIX/key.parts/idx`, uploaded by the batch Worker that wrote it.
//
// Uploads stream to the bucket as a multipart upload (the S3 file writer),
// flushed every part so memory holds at most a few parts per upload. An
// object is durable once the bucket answered its PUT or its
// CompleteMultipartUpload: commit() resolves only then.
//
// Bun 1.4.5 cannot abort a multipart upload: `writer.end(error)` completes it
// with the bytes so far, and the upload id is never exposed (oven-sh/bun
// #43134, open). An upload that is rejected therefore ends its multipart
// upload (so no incomplete upload is left to bill) and then deletes the
// object, which no record points at (file ids are never reused). Until then
// its key is written in a small journal under <data_dir>/s3-pending, so a
// crash in between is cleaned at the next start; so are deletions a crash
// cut short. A crash in the middle of an upload leaves an incomplete
// multipart upload only the bucket can see: set a lifecycle rule
// (AbortIncompleteMultipartUpload, docs/OPERATING.md "Storage on S3").
//
// Reads stream through this node: an S3File as a Response body makes Bun
// answer with a redirect to a presigned URL.
import type { S3File } from "bun";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../log";
import type { BlobLocator, BlobPart, BlobStore, BlobWriter, PartTarget } from "./blobStore";
import { readParts } from "./composed";
import { s3ClientOf, type S3Locator, type S3Settings } from "./locator";
import { trashIn, type Trash } from "./trash";

const MiB = 1 << 20;
/** S3's smallest part (but the last) is 5 MiB, and an upload has at most 10,000 parts. */
const MIN_PART_BYTES = 5 * MiB;
const MAX_PARTS = 9_000;
/** Parts sent at once per upload: with the part being filled, an upload holds at most (QUEUE + 1) parts in memory. */
const QUEUE = 4;
/** Objects removed at once when a composed blob's parts go. */
const DELETE_CONCURRENCY = 8;
const PROBE_TIMEOUT_MS = 3_000;

export interface S3StoreOptions {
  /** The largest blob to expect (limits.max_file_bytes): sets the part size, so that it fits in S3's 10,000 parts. */
  maxBlobBytes: number;
  log: Logger;
}

export class S3Store implements BlobStore {
  readonly client: Bun.S3Client;
  private readonly partSize: number;
  private readonly journal: Journal;
  private readonly trash: Trash;
  private readonly tmp: string;
  private readonly background = new Set<Promise<void>>();

  constructor(
    private readonly settings: S3Settings,
    /** Key prefix without a trailing slash ("" for none). */
    private readonly prefix: string,
    dataDir: string,
    private readonly opts: S3StoreOptions,
  ) {
    this.client = s3ClientOf(settings);
    this.partSize = Math.max(MIN_PART_BYTES, Math.ceil(opts.maxBlobBytes / MAX_PARTS / MiB) * MiB);
    this.journal = new Journal(join(dataDir, "s3-pending"));
    // Uploads' duplicate checks spill to <dataDir>/tmp (src/jsonl/validatorClient.ts); swept at start.
    this.tmp = join(dataDir, "tmp");
    mkdirSync(this.tmp, { recursive: true });
    this.trash = trashIn(dataDir);
  }

  private objectKey(key: string): string {
    return this.prefix ? `${this.prefix}/${key}` : key;
  }

  private file(key: string): S3File {
    return this.client.file(this.objectKey(key));
  }

  locate(key: string): BlobLocator {
    return { s3: this.settings, key: this.objectKey(key) };
  }

  partTarget(key: string, idx: number, claim: number): PartTarget {
    return { object: this.locate(partKeyOf(key, idx, claim)) as S3Locator, checkpoints: this.locate(`${key}.parts/${idx}`) as S3Locator };
  }

  createWriter(key: string): BlobWriter {
    const file = this.file(key);
    const partSize = this.partSize;
    const sink = file.writer({ partSize, queueSize: QUEUE, type: "application/octet-stream" });
    this.journal.add("upload", key);
    let bytes = 0;
    let unflushed = 0;
    let failure: unknown = null;
    let state: "open" | "committed" | "aborted" = "open";
    // The upload's end (PUT, or CompleteMultipartUpload): started by finish(), readBack() or commit().
    let ending: Promise<void> | null = null;
    const end = () => {
      if (!ending) {
        ending = Promise.resolve()
          .then(() => sink.end())
          .then(() => {});
        ending.catch(() => {}); // seen by commit() or readBack(); abort() does not care
      }
      return ending;
    };
    return {
      get bytes() {
        return bytes;
      },
      write(chunk: Uint8Array) {
        if (state !== "open" || ending) throw new Error("write to an S3 upload that has ended");
        if (failure) throw failure;
        // The sink copies the chunk into its part buffer.
        const w = sink.write(chunk);
        bytes += chunk.length;
        unflushed += chunk.length;
        const wait: Promise<unknown>[] = [];
        if (w instanceof Promise) wait.push(w);
        // Once a part's worth is buffered, hand it over and let the caller wait
        // while the queue is full: without this, the sink buffered a whole
        // 256 MB upload (455 MB RSS; 148 MB with it).
        if (unflushed >= partSize) {
          unflushed = 0;
          const f = sink.flush();
          if (f instanceof Promise) wait.push(f);
        }
        if (wait.length === 0) return;
        return Promise.all(wait).then(
          () => {},
          (e) => void (failure ??= e),
        );
      },
      finish() {
        // The last byte is in: complete the upload while the caller still validates.
        if (state === "open" && !failure) void end();
      },
      readBack() {
        // What has been written: the object, once the upload is complete (before
        // commit: only a rejected upload is read back, and abort() deletes it).
        return lazyStream(async () => {
          await end();
          return file.stream();
        });
      },
      commit: async () => {
        if (state !== "open") throw new Error(`commit of an S3 upload that is ${state}`);
        if (failure) throw failure;
        await end();
        if (failure) throw failure;
        state = "committed";
        await this.journal.remove("upload", key);
      },
      abort: () => {
        if (state !== "open") return;
        state = "aborted";
        this.track(
          (async () => {
            // Bun 1.4.5 completes the upload even with an error (see the top of
            // this file); a later Bun aborts it and stores nothing. Either way,
            // then no object may remain.
            try {
              await (ending ?? Promise.resolve().then(() => sink.end(new Error("upload aborted"))));
            } catch {}
            await this.client.delete(this.objectKey(key));
            await this.journal.remove("upload", key);
          })(),
          "removing an aborted upload failed (removed at the next start)",
          key,
        );
      },
    };
  }

  open(key: string): Blob {
    return this.file(key);
  }

  read(key: string, range?: { start: number; end: number }): Blob | ReadableStream<Uint8Array> {
    if (range && range.end <= range.start) return new Blob([]);
    const f = this.file(key);
    return (range ? f.slice(range.start, range.end) : f).stream();
  }

  delete(key: string): void {
    this.journal.add("delete", key);
    this.track(
      this.remove(key).then(() => this.journal.remove("delete", key)),
      "removing a file from the bucket failed (tried again at the next start)",
      key,
    );
  }

  /** The object and every part object of `key`. */
  private async remove(key: string): Promise<void> {
    await this.client.delete(this.objectKey(key));
    const prefix = `${this.objectKey(key)}.parts/`;
    let token: string | undefined;
    do {
      const page = await this.client.list({ prefix, continuationToken: token, maxKeys: 1000 });
      const keys = (page.contents ?? []).map((c) => c.key);
      for (let i = 0; i < keys.length; i += DELETE_CONCURRENCY) await Promise.all(keys.slice(i, i + DELETE_CONCURRENCY).map((k) => this.client.delete(k)));
      token = page.isTruncated ? page.nextContinuationToken : undefined;
    } while (token);
  }

  async adoptPart(key: string, idx: number, staged: string, claim: number): Promise<BlobPart | null> {
    // The Worker of the run that ended the shard (claim) uploads its part
    // under a name of that run before it reports the shard done: that object
    // is the shard's whole part. A local file here may be older (on a
    // cluster another node may have ended the shard after this one ran part
    // of it), and a run that lost its lease uploads under its own name, so
    // it can never replace the part that counts.
    const partKey = partKeyOf(key, idx, claim);
    const remote = await this.remoteSize(partKey);
    if (remote) return { key: partKey, bytes: remote };
    const local = await localSize(staged);
    // None, or empty: empty parts are not kept.
    if (!local) return null;
    // Not in the bucket (it should be): from this node's disk, the one copy through this node.
    await this.file(partKey).write(Bun.file(staged));
    return { key: partKey, bytes: local };
  }

  async syncParts(): Promise<void> {
    // An object is durable once its upload was answered.
  }

  readComposed(parts: readonly BlobPart[], start: number, end: number): ReadableStream<Uint8Array> {
    const body = readParts(parts, start, end, (p) => this.file(p.key));
    return body instanceof Blob ? body.stream() : body;
  }

  freeBytes(): null {
    return null;
  }

  async probe(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const listing = this.client.list({ prefix: this.prefix ? `${this.prefix}/` : undefined, maxKeys: 1 });
      const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("timed out")), PROBE_TIMEOUT_MS)));
      await Promise.race([listing, timeout]);
      return true;
    } catch (e) {
      this.opts.log.warn("the bucket does not answer", { bucket: this.settings.bucket, error: String(e) });
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  sweepTemporary(): void {
    this.trash.emptyAtStart();
    for (const name of readdirSync(this.tmp)) this.trash.discard(join(this.tmp, name));
    // Uploads a crash left half done (their object, if it was completed) and deletions it cut short.
    for (const { op, key } of this.journal.entries()) {
      const work = op === "upload" ? this.client.delete(this.objectKey(key)) : this.remove(key);
      this.track(
        work.then(() => this.journal.remove(op, key)),
        "cleaning what a crash left in the bucket failed (tried again at the next start)",
        key,
      );
    }
  }

  async settled(): Promise<void> {
    while (this.background.size > 0) await Promise.all([...this.background]);
    await this.trash.settled();
  }

  private async remoteSize(key: string): Promise<number | null> {
    try {
      return (await this.file(key).stat()).size;
    } catch (e) {
      if ((e as { code?: string }).code === "NoSuchKey") return null;
      throw e;
    }
  }

  /** Runs `work` off the caller's path; a failure is logged (the journal keeps what is left to do). */
  private track(work: Promise<void>, message: string, key: string): void {
    const p: Promise<void> = work
      .catch((e) => this.opts.log.error(message, { blob: key, error: String(e) }))
      .finally(() => this.background.delete(p));
    this.background.add(p);
  }
}

/** A part object: shard `idx`'s part as written by the shard's run number `claim`. */
const partKeyOf = (key: string, idx: number, claim: number) => `${key}.parts/${idx}.${claim}`;

async function localSize(path: string): Promise<number | null> {
  try {
    return (await stat(path)).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
}

/** A stream that opens its source on the first read. */
function lazyStream(open: () => Promise<ReadableStream<Uint8Array>>): ReadableStream<Uint8Array> {
  let reader: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(reason?: unknown): Promise<void> } | null = null;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const r = await (reader ??= (await open()).getReader()).read();
        if (r.done || !r.value) controller.close();
        else controller.enqueue(r.value);
      },
      cancel(reason) {
        return reader?.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * Keys with bucket work still to do, one empty file each
 * (`upload.<key>`: an upload not yet committed, whose object must not stay;
 * `delete.<key>`: a blob being removed). Not fsynced: a lost entry only
 * leaves an object no record points at.
 */
class Journal {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  private path(op: string, key: string): string {
    return join(this.dir, `${op}.${encodeURIComponent(key)}`);
  }

  add(op: "upload" | "delete", key: string): void {
    writeFileSync(this.path(op, key), "");
  }

  /** Off the calling thread (a leftover entry only makes the next start look at the key again); chained work waits for it. */
  remove(op: "upload" | "delete", key: string): Promise<void> {
    return rm(this.path(op, key), { force: true }).catch(() => {});
  }

  entries(): { op: "upload" | "delete"; key: string }[] {
    const out: { op: "upload" | "delete"; key: string }[] = [];
    for (const name of readdirSync(this.dir)) {
      const dot = name.indexOf(".");
      const op = name.slice(0, dot);
      if (op === "upload" || op === "delete") out.push({ op, key: decodeURIComponent(name.slice(dot + 1)) });
    }
    return out;
  }
}

// Blobs as objects in an S3-compatible bucket (storage.url = s3://BUCKET[/PREFIX]).
// A blob `key` is the object `PREFIX/key`; part `idx` of a composed blob
// is the object `PREFIX/key.parts/idx.claim`, uploaded by the batch Worker
// that wrote it. Every call to the bucket goes through ./bucket.ts, which
// tries a failed call again where it failed (./retry.ts, docs/CONTRACT.md §17).
//
// Uploads stream to the bucket as a multipart upload made by ./bucket.ts,
// one part at a time as the bytes come: memory holds at most QUEUE + 1
// parts per upload. An upload shorter than a part is one PUT at the end. An
// object is durable once the bucket answered its PUT or its
// CompleteMultipartUpload: commit() resolves only then. An upload that is
// rejected is aborted (AbortMultipartUpload: no object is made; one already
// completed is deleted). Until then its key is written in a small journal
// under <data_dir>/s3-pending, so a crash in between is cleaned at the next
// start; so are deletions a crash cut short. A crash in the middle of an
// upload leaves an incomplete multipart upload only the bucket can see: set
// a lifecycle rule (AbortIncompleteMultipartUpload, docs/OPERATING.md
// "Storage on S3").
//
// Reads stream through this node (an S3File as a Response body makes Bun
// answer with a redirect to a presigned URL), and resume where a failure
// cut them (./retry.ts resumableStream).
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../log";
import type { BlobLocator, BlobPart, BlobStore, BlobWriter, PartTarget } from "./blobStore";
import { bucketOf, type Bucket, type LazyBlob, type MultipartUpload } from "./bucket";
import { readParts } from "./composed";
import type { S3Locator, S3Settings } from "./locator";
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
  readonly bucket: Bucket;
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
    this.bucket = bucketOf(settings);
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

  locate(key: string): BlobLocator {
    return { s3: this.settings, key: this.objectKey(key) };
  }

  partTarget(key: string, idx: number, claim: number): PartTarget {
    return { object: this.locate(partKeyOf(key, idx, claim)) as S3Locator, checkpoints: this.locate(`${key}.parts/${idx}`) as S3Locator };
  }

  createWriter(key: string): BlobWriter {
    const bucket = this.bucket;
    const objectKey = this.objectKey(key);
    const partSize = this.partSize;
    this.journal.add("upload", key);
    let bytes = 0;
    /** The part being filled (null until the next byte comes), and its bytes so far. */
    let part: Uint8Array | null = null;
    let fill = 0;
    let parts = 0;
    /** The multipart upload, begun with the first full part. */
    let upload: Promise<MultipartUpload> | null = null;
    const sending = new Set<Promise<void>>();
    let failure: unknown = null;
    let state: "open" | "committed" | "aborted" = "open";
    const send = (data: Uint8Array) => {
      const n = ++parts;
      if (!upload) {
        upload = bucket.startMultipart(objectKey);
        upload.catch(() => {}); // seen through the parts
      }
      const p: Promise<void> = upload
        .then((u) => u.part(n, data))
        .catch((e) => void (failure ??= e))
        .finally(() => sending.delete(p));
      sending.add(p);
    };
    // The upload's end (one PUT, or the last part and CompleteMultipartUpload): started by finish(), readBack() or commit().
    let ending: Promise<void> | null = null;
    const end = () => {
      if (!ending) {
        ending = (async () => {
          if (!upload) {
            const body = part ? part.subarray(0, fill) : new Uint8Array(0);
            part = null;
            fill = 0;
            await bucket.put(objectKey, body);
            return;
          }
          if (fill > 0) send(part!.subarray(0, fill));
          part = null;
          fill = 0;
          while (sending.size > 0) await Promise.all([...sending]);
          if (failure) throw failure;
          await (await upload).complete(bytes);
        })();
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
        // Copied into the part being filled; a full part goes to the bucket.
        for (let off = 0; off < chunk.length; ) {
          part ??= new Uint8Array(partSize);
          const n = Math.min(partSize - fill, chunk.length - off);
          part.set(chunk.subarray(off, off + n), fill);
          fill += n;
          off += n;
          if (fill === partSize) {
            send(part);
            part = null;
            fill = 0;
          }
        }
        bytes += chunk.length;
        // While QUEUE parts are on their way the caller waits: memory stays bounded.
        if (sending.size < QUEUE) return;
        return (async () => {
          while (sending.size >= QUEUE) await Promise.race(sending);
        })();
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
          return bucket.stream(objectKey);
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
        part = null;
        this.track(
          (async () => {
            // No object may remain: the multipart upload is aborted (its
            // parts go, none becomes an object), and whatever an end that
            // already ran made is deleted.
            try {
              await ending;
            } catch {}
            while (sending.size > 0) await Promise.all([...sending]);
            if (upload) {
              const u = await upload.catch(() => null);
              await u?.abort();
            }
            await bucket.delete(objectKey);
            await this.journal.remove("upload", key);
          })(),
          "removing an aborted upload failed (removed at the next start)",
          key,
        );
      },
    };
  }

  createPartWriter(key: string, name: string): { partKey: string; writer: BlobWriter } {
    // An object of its own beside the blob's other parts (delete(key) lists them all).
    const partKey = `${key}.parts/${name}`;
    return { partKey, writer: this.createWriter(partKey) };
  }

  locateComposed(parts: readonly BlobPart[]): BlobLocator {
    return { parts: parts.map((p) => ({ ...(this.locate(p.key) as S3Locator), bytes: p.bytes })) };
  }

  open(key: string): LazyBlob {
    return this.bucket.blob(this.objectKey(key));
  }

  read(key: string, range?: { start: number; end: number }): ReadableStream<Uint8Array> {
    return range ? this.bucket.stream(this.objectKey(key), range.start, range.end) : this.bucket.stream(this.objectKey(key));
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
    await this.bucket.delete(this.objectKey(key));
    const prefix = `${this.objectKey(key)}.parts/`;
    let token: string | undefined;
    do {
      const page = await this.bucket.list({ prefix, continuationToken: token, maxKeys: 1000 });
      const keys = (page.contents ?? []).map((c) => c.key);
      for (let i = 0; i < keys.length; i += DELETE_CONCURRENCY) await Promise.all(keys.slice(i, i + DELETE_CONCURRENCY).map((k) => this.bucket.delete(k)));
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
    const remote = await this.bucket.size(this.objectKey(partKey));
    if (remote) return { key: partKey, bytes: remote };
    const local = await localSize(staged);
    // None, or empty: empty parts are not kept.
    if (!local) return null;
    // Not in the bucket (it should be): from this node's disk, the one copy through this node.
    await this.bucket.put(this.objectKey(partKey), Bun.file(staged));
    return { key: partKey, bytes: local };
  }

  async syncParts(): Promise<void> {
    // An object is durable once its upload was answered.
  }

  readComposed(parts: readonly BlobPart[], start: number, end: number): ReadableStream<Uint8Array> {
    const body = readParts(parts, start, end, (p) => this.bucket.blob(this.objectKey(p.key)));
    return body instanceof ReadableStream ? body : body.stream();
  }

  freeBytes(): null {
    return null;
  }

  async probe(): Promise<boolean> {
    try {
      // One try: a health check says how the bucket is now.
      await this.bucket.list({ prefix: this.prefix ? `${this.prefix}/` : undefined, maxKeys: 1 }, { maxTries: 1, timeoutMs: PROBE_TIMEOUT_MS });
      return true;
    } catch (e) {
      this.opts.log.warn("the bucket does not answer", { bucket: this.settings.bucket, error: String(e) });
      return false;
    }
  }

  sweepTemporary(): void {
    this.trash.emptyAtStart();
    for (const name of readdirSync(this.tmp)) this.trash.discard(join(this.tmp, name));
    // Uploads a crash left half done (their object, if it was completed) and deletions it cut short.
    for (const { op, key } of this.journal.entries()) {
      const work = op === "upload" ? this.bucket.delete(this.objectKey(key)) : this.remove(key);
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

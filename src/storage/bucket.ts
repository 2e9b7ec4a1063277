// The one way to the bucket: every S3 call offpeak makes (on the HTTP thread
// and in batch Workers) goes through a Bucket, and each goes through
// withRetries (./retry.ts): stat, get, range, streams (resumed at the first
// byte not yet delivered), put, list, delete, and multipart uploads.
//
// Multipart uploads are made here, one call at a time, not by Bun's S3 file
// writer: Bun 1.4.5 retries neither its CreateMultipartUpload nor its
// CompleteMultipartUpload, retries a part only a few times at once, and
// cannot abort an upload (oven-sh/bun#43134). Those calls are signed here
// (AWS Signature V4, query-string form, UNSIGNED-PAYLOAD) on the URL that
// Bun's own presign() gives for the object, so the endpoint, path style,
// region and credentials are exactly Bun's; the rest (get, put of a small
// body, list, delete, stat) is Bun's S3 client.
import type { S3Settings } from "./locator";
import { resumableStream, withRetries, type StorageOp } from "./retry";

const MiB = 1 << 20;
/** S3's smallest part (but the last). A body under this size goes up as one PUT by Bun's client (which, from a file, makes a multipart upload of its own from this size on). */
export const MIN_PART_BYTES = 5 * MiB;
/** Parts of an upload made from a Blob (a local file): this size, at most QUEUE at once. */
const BLOB_PART_BYTES = 8 * MiB;
const BLOB_QUEUE = 4;
/** Metadata calls (stat, list, delete, create/complete/abort) that take longer than this are tried again. */
const META_TIMEOUT_MS = 30_000;
/** A body's upload may take 30 s plus a second per MiB before it is tried again. */
const uploadTimeoutMs = (bytes: number) => 30_000 + Math.ceil(bytes / MiB) * 1000;

/** An error answered by the bucket to a call signed here, shaped like Bun's S3Error (name, code) plus the status. */
export class S3CallError extends Error {
  override readonly name = "S3Error";
  constructor(
    readonly code: string,
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface ListPage {
  contents?: { key: string; size?: number }[];
  isTruncated?: boolean;
  nextContinuationToken?: string;
}

/** One Bucket per distinct settings, per thread. */
const buckets = new Map<string, Bucket>();

/** The Bucket for `settings` (made once per thread). */
export function bucketOf(settings: S3Settings): Bucket {
  const id = JSON.stringify(settings);
  let b = buckets.get(id);
  if (!b) buckets.set(id, (b = new Bucket(settings)));
  return b;
}

export class Bucket {
  /** Bun's S3 client: used only here, every call inside withRetries. */
  private readonly client: Bun.S3Client;

  constructor(readonly settings: S3Settings) {
    // retry: 0: Bun's client would try a failed PUT again at once, without
    // waiting (and without counting it); the retries here wait and count.
    this.client = new Bun.S3Client({ ...settings, retry: 0 });
  }

  /** The object's size, or null if there is none. */
  async size(key: string): Promise<number | null> {
    try {
      return (await withRetries("stat", () => this.client.file(key).stat(), { timeoutMs: META_TIMEOUT_MS })).size;
    } catch (e) {
      if ((e as { code?: string }).code === "NoSuchKey") return null;
      throw e;
    }
  }

  /** Bytes [start, end) of the object (the whole object without a range), in memory: for small reads. */
  async bytes(key: string, range?: { start: number; end: number }): Promise<Uint8Array> {
    const op: StorageOp = range ? "range" : "get";
    if (range && range.end <= range.start) return new Uint8Array(0);
    return withRetries(
      op,
      async () => {
        const f = this.client.file(key);
        return new Uint8Array(await (range ? f.slice(range.start, range.end) : f).arrayBuffer());
      },
      { timeoutMs: uploadTimeoutMs(range ? range.end - range.start : 8 * MiB) },
    );
  }

  /** Bytes [start, end) of the object (to its end when `end` is undefined) as a stream that resumes after a failure (retry.ts). */
  stream(key: string, start = 0, end?: number): ReadableStream<Uint8Array> {
    if (end !== undefined && end <= start) return new Blob([]).stream();
    const whole = start === 0 && end === undefined;
    return resumableStream(
      whole ? "get" : "range",
      (from) => {
        const f = this.client.file(key);
        return (from === 0 && end === undefined ? f : f.slice(from, end)).stream();
      },
      start,
      end,
    );
  }

  /** A lazily read view of the object (slice, stream, arrayBuffer), every read through the retries. */
  blob(key: string): LazyBlob {
    return new BucketBlob(this, key, 0, undefined);
  }

  /**
   * Stores `body` as the object `key`: one PUT when it is small, else a
   * multipart upload whose parts are slices of `body` (a local file: read
   * again for a part that must be sent again). Resolves once the bucket
   * answered (the object is durable).
   */
  async put(key: string, body: Uint8Array | Blob): Promise<void> {
    const size = body instanceof Blob ? body.size : body.length;
    if (size < MIN_PART_BYTES) {
      await withRetries("put", () => this.client.file(key).write(body).then(() => {}), { timeoutMs: uploadTimeoutMs(size) });
      return;
    }
    const blob = body instanceof Blob ? body : new Blob([body as Uint8Array<ArrayBuffer>]);
    const upload = await this.startMultipart(key);
    try {
      const parts = Math.ceil(size / BLOB_PART_BYTES);
      let next = 0;
      let failure: unknown = null;
      // BLOB_QUEUE lanes take the parts in turn; after a failure none starts another (and all have stopped before the abort).
      const lane = async () => {
        for (let n = next++; n < parts && !failure; n = next++) {
          await upload.part(n + 1, blob.slice(n * BLOB_PART_BYTES, Math.min(size, (n + 1) * BLOB_PART_BYTES))).catch((e) => void (failure ??= e));
        }
      };
      await Promise.all(Array.from({ length: Math.min(BLOB_QUEUE, parts) }, lane));
      if (failure) throw failure;
      await upload.complete(size);
    } catch (e) {
      await upload.abort().catch(() => {});
      throw e;
    }
  }

  /** Removes the object (nothing to remove is no failure). */
  async delete(key: string): Promise<void> {
    await withRetries("delete", () => this.client.delete(key).then(() => {}), { timeoutMs: META_TIMEOUT_MS });
  }

  /** One page of a listing. `maxTries: 1` for a health probe. */
  list(options: { prefix?: string; continuationToken?: string; maxKeys?: number }, retry: { maxTries?: number; timeoutMs?: number } = {}): Promise<ListPage> {
    return withRetries("list", () => this.client.list(options) as Promise<ListPage>, { timeoutMs: retry.timeoutMs ?? META_TIMEOUT_MS, maxTries: retry.maxTries });
  }

  /** Every key under `prefix` (all pages). */
  async keys(prefix: string): Promise<{ key: string; size?: number }[]> {
    const out: { key: string; size?: number }[] = [];
    let token: string | undefined;
    do {
      const page = await this.list({ prefix, continuationToken: token, maxKeys: 1000 });
      for (const c of page.contents ?? []) out.push(c);
      token = page.isTruncated ? page.nextContinuationToken : undefined;
    } while (token);
    return out;
  }

  /** Begins a multipart upload of `key` (CreateMultipartUpload, retried). */
  async startMultipart(key: string): Promise<MultipartUpload> {
    const xml = await withRetries("create_multipart", () => this.call("POST", key, { uploads: "" }), { timeoutMs: META_TIMEOUT_MS });
    const uploadId = tagOf(xml, "UploadId");
    if (!uploadId) throw new Error(`CreateMultipartUpload of ${key} answered no UploadId`);
    return new MultipartUpload(this, key, uploadId);
  }

  /**
   * One request signed here (query-string Signature V4 on the URL Bun's
   * presign() gives for the object). Returns the answer's body text; an
   * error answer (also an <Error> in a 200, as CompleteMultipartUpload may
   * send) throws an S3CallError. `headerOut` receives the answer's headers.
   */
  async call(method: string, key: string, query: Record<string, string>, body?: Blob | Uint8Array | string, headerOut?: (h: Headers) => void): Promise<string> {
    const url = this.signedUrl(method, key, query);
    const res = await fetch(url, { method, body: body as RequestInit["body"], headers: body instanceof Blob || body instanceof Uint8Array ? { "content-type": "application/octet-stream" } : undefined });
    const text = await res.text();
    if (res.status >= 300 || /^\s*(<\?xml[^>]*>\s*)?<Error>/.test(text)) {
      const code = tagOf(text, "Code") ?? `HTTP${res.status}`;
      throw new S3CallError(code, res.status >= 300 ? res.status : 500, `${method} ${key}: ${res.status} ${code}: ${tagOf(text, "Message") ?? text.slice(0, 200)}`);
    }
    headerOut?.(res.headers);
    return text;
  }

  private signedUrl(method: string, key: string, query: Record<string, string>): string {
    const secret = this.settings.secretAccessKey;
    if (!secret) throw new Error("signing a bucket call needs the secret access key (storage settings)");
    // Bun's presigned URL for the object: its endpoint, path style, region, credentials and time.
    return resignedUrl(this.client.file(key).presign({ method: "GET", expiresIn: 3600 }), method, query, secret);
  }
}

/**
 * `presigned` (a query-string Signature V4 URL, as Bun's presign() makes
 * them) signed again for `method` with `query` added: the same endpoint,
 * path, credentials, region and time, UNSIGNED-PAYLOAD.
 */
export function resignedUrl(presigned: string, method: string, query: Record<string, string>, secret: string): string {
  const base = new URL(presigned);
  const params = new Map<string, string>();
  for (const [k, v] of base.searchParams) if (k !== "X-Amz-Signature") params.set(k, v);
  for (const [k, v] of Object.entries(query)) params.set(k, v);
  const canonicalQuery = [...params.entries()]
    .map(([k, v]) => [rfc3986(k), rfc3986(v)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  const amzDate = params.get("X-Amz-Date");
  const credential = params.get("X-Amz-Credential");
  if (!amzDate || !credential) throw new Error("not a Signature V4 presigned URL");
  const scope = credential.split("/").slice(1).join("/");
  const [day, region, service] = scope.split("/") as [string, string, string];
  const canonicalRequest = [method, base.pathname, canonicalQuery, `host:${base.host}`, "", "host", "UNSIGNED-PAYLOAD"].join("\n");
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256Hex(canonicalRequest)].join("\n");
  let k: Buffer = hmac(`AWS4${secret}`, day);
  k = hmac(k, region);
  k = hmac(k, service);
  k = hmac(k, "aws4_request");
  const signature = new Bun.CryptoHasher("sha256", k).update(toSign).digest("hex");
  return `${base.origin}${base.pathname}?${canonicalQuery}&X-Amz-Signature=${signature}`;
}

/** One multipart upload: parts (retried each), then complete or abort. */
export class MultipartUpload {
  private readonly etags: string[] = [];

  constructor(
    private readonly bucket: Bucket,
    readonly key: string,
    readonly uploadId: string,
  ) {}

  /** Uploads part `n` (from 1); sending the same part again replaces it. */
  async part(n: number, body: Uint8Array | Blob): Promise<void> {
    const size = body instanceof Blob ? body.size : body.length;
    let etag: string | null = null;
    await withRetries(
      "upload_part",
      () => this.bucket.call("PUT", this.key, { partNumber: String(n), uploadId: this.uploadId }, body, (h) => (etag = h.get("etag"))),
      { timeoutMs: uploadTimeoutMs(size) },
    );
    if (!etag) throw new Error(`UploadPart ${n} of ${this.key} answered no ETag`);
    this.etags[n - 1] = etag;
  }

  /** Completes the upload with the parts sent; `size`: the object's size, to recognize a completion whose answer was lost. */
  async complete(size: number): Promise<void> {
    const xml =
      "<CompleteMultipartUpload>" +
      this.etags.map((etag, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${escapeXml(etag)}</ETag></Part>`).join("") +
      "</CompleteMultipartUpload>";
    await withRetries(
      "complete_multipart",
      async (attempt) => {
        // An earlier try may have completed it and its answer been lost: then
        // the upload is gone (S3 answers NoSuchUpload, some stores a 500) and
        // the object is there.
        if (attempt > 1 && (await this.bucket.size(this.key)) === size) return;
        await this.bucket.call("POST", this.key, { uploadId: this.uploadId }, xml);
      },
      { timeoutMs: META_TIMEOUT_MS + Math.ceil(size / (64 * MiB)) * 1000 },
    );
  }

  /** Aborts the upload: its parts are removed, no object is made. */
  async abort(): Promise<void> {
    await withRetries(
      "abort_multipart",
      async () => {
        try {
          await this.bucket.call("DELETE", this.key, { uploadId: this.uploadId });
        } catch (e) {
          if ((e as { code?: string }).code === "NoSuchUpload") return;
          throw e;
        }
      },
      { timeoutMs: META_TIMEOUT_MS },
    );
  }
}

/**
 * The read side of a Blob that Workers and the stores use (slice, stream,
 * arrayBuffer), for a local file (Bun.file) or an object (BucketBlob, whose
 * reads are retried): never a Response body.
 */
export interface LazyBlob {
  slice(start?: number, end?: number): LazyBlob;
  stream(): ReadableStream<Uint8Array>;
  arrayBuffer(): Promise<ArrayBuffer>;
}

class BucketBlob implements LazyBlob {
  constructor(
    private readonly bucket: Bucket,
    private readonly key: string,
    private readonly start: number,
    private readonly end: number | undefined,
  ) {}

  slice(start = 0, end?: number): LazyBlob {
    const from = this.start + Math.max(0, start);
    let to = end === undefined ? this.end : this.start + Math.max(0, end);
    if (this.end !== undefined && to !== undefined) to = Math.min(to, this.end);
    return new BucketBlob(this.bucket, this.key, from, to === undefined ? undefined : Math.max(from, to));
  }

  stream(): ReadableStream<Uint8Array> {
    return this.bucket.stream(this.key, this.start, this.end);
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    if (this.start === 0 && this.end === undefined) return toArrayBuffer(await this.bucket.bytes(this.key));
    if (this.end === undefined) return new Response(this.stream()).arrayBuffer();
    return toArrayBuffer(await this.bucket.bytes(this.key, { start: this.start, end: this.end }));
  }
}

const toArrayBuffer = (u: Uint8Array): ArrayBuffer => (u.byteOffset === 0 && u.byteLength === u.buffer.byteLength ? (u.buffer as ArrayBuffer) : (u.slice().buffer as ArrayBuffer));

function tagOf(xml: string, tag: string): string | null {
  const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(xml);
  return m ? unescapeXml(m[1]!) : null;
}

const escapeXml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const unescapeXml = (s: string) => s.replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");

/** URI encoding as Signature V4 wants it: everything but A-Z a-z 0-9 - _ . ~ */
const rfc3986 = (s: string) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
// Bun's own hasher, not node:crypto: this module loads in every batch Worker,
// and node:crypto cost each 0.6 MB of memory (docs/CONTRACT.md §20; docs/OPERATING.md "Batch Workers").
const sha256Hex = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex");
const hmac = (key: string | Buffer, data: string) => new Bun.CryptoHasher("sha256", key).update(data).digest();

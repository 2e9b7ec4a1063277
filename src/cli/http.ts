// The client side of the API, with plain fetch: JSON calls, a multipart
// upload streamed from disk (never read whole into memory), and downloads
// streamed to disk. Failures become CliErrors with the server's own message.
import { closeSync, openSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { basename } from "node:path";
import { CliError, usageError, type Connection } from "./args";

/** How long a plain JSON call may take (uploads and downloads have no limit). */
const CALL_TIMEOUT_MS = 60_000;

export interface FileRecord {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
  status: string;
  expires_at: number | null;
}

export interface Batch {
  id: string;
  status: string;
  endpoint: string;
  model: string | null;
  input_file_id: string;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  completion_window: string;
  errors: { data: { code: string; message: string; param: string | null; line: number | null }[] } | null;
  request_counts: { total: number; completed: number; failed: number };
  /** docs/CONTRACT.md §18 (absent from older servers). */
  estimated_completion_at?: number | null;
  status_details?: { code: string; message: string; since: number | null } | null;
  [k: string]: unknown;
}

export interface List<T> {
  data: T[];
  has_more: boolean;
  first_id: string | null;
  last_id: string | null;
}

export class Client {
  constructor(readonly conn: Connection) {}

  private url(path: string, query?: Record<string, string | number | undefined>): string {
    let u = this.conn.baseUrl + path;
    const q = Object.entries(query ?? {}).filter(([, v]) => v !== undefined && v !== "");
    if (q.length) u += "?" + new URLSearchParams(q.map(([k, v]): [string, string] => [k, String(v)])).toString();
    return u;
  }

  /** A raw request; throws a CliError (exit 2) when the server cannot be reached or answers non-2xx. */
  async fetch(method: string, path: string, init: { query?: Record<string, string | number | undefined>; json?: unknown; body?: RequestInit["body"]; headers?: Record<string, string>; timeout?: boolean | number } = {}): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.conn.apiKey}`, ...init.headers };
    let body = init.body;
    if (init.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(init.json);
    }
    const waitMs = typeof init.timeout === "number" ? init.timeout : CALL_TIMEOUT_MS;
    let res: Response;
    try {
      res = await fetch(this.url(path, init.query), {
        method,
        headers,
        body,
        signal: init.timeout === false ? undefined : AbortSignal.timeout(waitMs),
      });
    } catch (e) {
      const err = e as Error & { code?: string };
      const why = err.name === "TimeoutError" ? `no answer within ${waitMs / 1000} s` : (err.code ?? err.message);
      throw new CliError(`cannot reach offpeak at ${this.conn.baseUrl} (${why}). Is the server running? Set --base-url or OFFPEAK_BASE_URL.`, 2, "connection");
    }
    if (!res.ok) throw await httpError(res, this.conn.baseUrl);
    return res;
  }

  async json<T>(method: string, path: string, init: { query?: Record<string, string | number | undefined>; json?: unknown; timeout?: number } = {}): Promise<T> {
    const res = await this.fetch(method, path, init);
    const text = await res.text();
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new CliError(`${this.conn.baseUrl}${path} did not answer with JSON: is --base-url an offpeak API base (…/v1)?`, 2);
    }
  }

  /** POST /files with the file's bytes streamed from disk; `onSent` sees the bytes handed to the socket so far. */
  async upload(filePath: string, purpose: string, opts: { expiresAfterSeconds?: number; onSent?: (sent: number, total: number) => void } = {}): Promise<FileRecord> {
    let size: number;
    try {
      const st = statSync(filePath);
      if (!st.isFile()) throw new Error("not a regular file");
      size = st.size;
    } catch (e) {
      throw usageError(`cannot read ${filePath}: ${(e as Error).message}`);
    }
    const fields: [string, string][] = [["purpose", purpose]];
    if (opts.expiresAfterSeconds !== undefined) fields.push(["expires_after[anchor]", "created_at"], ["expires_after[seconds]", String(opts.expiresAfterSeconds)]);
    const body = multipartFromFile(filePath, size, fields, opts.onSent);
    const res = await this.fetch("POST", "/files", {
      body: body.stream,
      headers: { "content-type": body.contentType, "content-length": String(body.length) },
      timeout: false,
    });
    return (await res.json()) as FileRecord;
  }

  /**
   * GET /files/{id}/content into `dest` (through `dest.part`, renamed when
   * complete) or, for null, to stdout. Chunks are written as they arrive.
   */
  async download(fileId: string, dest: string | null, onReceived?: (received: number, total: number | null) => void): Promise<number> {
    const res = await this.fetch("GET", `/files/${encodeURIComponent(fileId)}/content`, { timeout: false });
    const total = Number(res.headers.get("content-length") ?? NaN);
    let received = 0;
    if (dest === null) {
      try {
        for await (const chunk of res.body!) {
          received += chunk.length;
          if (!process.stdout.write(chunk)) await new Promise((r) => process.stdout.once("drain", r));
        }
      } catch (e) {
        throw new CliError(`download of ${fileId} broke off after ${received} bytes: ${(e as Error).message}`, 2, "connection");
      }
      return received;
    }
    const part = `${dest}.part`;
    let fd: number;
    try {
      fd = openSync(part, "w");
    } catch (e) {
      throw usageError(`cannot write ${dest}: ${(e as Error).message}`);
    }
    try {
      for await (const chunk of res.body!) {
        let off = 0;
        while (off < chunk.length) off += writeSync(fd, chunk, off, chunk.length - off);
        received += chunk.length;
        onReceived?.(received, Number.isFinite(total) ? total : null);
      }
      closeSync(fd);
      fd = -1;
      renameSync(part, dest);
    } catch (e) {
      if (fd !== -1) closeSync(fd);
      rmSync(part, { force: true });
      if (e instanceof CliError) throw e;
      throw new CliError(`download of ${fileId} broke off after ${received} bytes: ${(e as Error).message}`, 2, "connection");
    }
    return received;
  }
}

async function httpError(res: Response, baseUrl: string): Promise<CliError> {
  let message = `HTTP ${res.status}`;
  try {
    const body = (await res.json()) as { error?: { message?: string; code?: string | null } };
    if (body?.error?.message) message += ` (${body.error.code ?? "error"}): ${body.error.message}`;
  } catch {
    // not an offpeak error body
  }
  if (res.status === 401) message += ". Check --api-key / OFFPEAK_API_KEY.";
  if (res.status === 404 && !message.includes("(")) message += `: is ${baseUrl} an offpeak API base (…/v1)?`;
  return new CliError(message, 2, "http");
}

/** Content-Disposition filename: plain when it is safe ASCII, else RFC 5987. */
function dispositionName(name: string): string {
  return /^[\x20-\x7e]+$/.test(name) && !/["\\]/.test(name) ? `filename="${name}"` : `filename*=UTF-8''${encodeURIComponent(name)}`;
}

/** A multipart/form-data body: the fields, then the file read chunk by chunk from disk, with its exact length. */
export function multipartFromFile(filePath: string, size: number, fields: [string, string][], onSent?: (sent: number, total: number) => void) {
  const boundary = "offpeak-" + crypto.randomUUID().replace(/-/g, "");
  let head = "";
  for (const [k, v] of fields) head += `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`;
  head += `--${boundary}\r\nContent-Disposition: form-data; name="file"; ${dispositionName(basename(filePath))}\r\nContent-Type: application/octet-stream\r\n\r\n`;
  const headBytes = new TextEncoder().encode(head);
  const tailBytes = new TextEncoder().encode(`\r\n--${boundary}--\r\n`);
  const length = headBytes.length + size + tailBytes.length;
  let reader: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(reason?: unknown): Promise<void> } | null = null;
  let phase: "head" | "file" | "done" = "head";
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (phase === "head") {
        phase = "file";
        reader = Bun.file(filePath).stream().getReader();
        controller.enqueue(headBytes);
        return;
      }
      if (phase === "file") {
        const { done, value } = await reader!.read();
        if (!done && value) {
          sent += value.length;
          onSent?.(sent, size);
          controller.enqueue(value);
          return;
        }
        phase = "done";
      }
      controller.enqueue(tailBytes);
      controller.close();
    },
    cancel(reason) {
      return reader?.cancel(reason);
    },
  });
  return { stream, contentType: `multipart/form-data; boundary=${boundary}`, length };
}

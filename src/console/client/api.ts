// The console's only way to the server: the public API under api/v1, with
// the key in the Authorization header (never in a URL).
import type { Batch, ErrorBody } from "./types";

/** Relative, so a console served under a path prefix (a reverse proxy) still finds its API. */
const BASE = "api/v1";

let key: string | null = null;
let onUnauthorized: (() => void) | null = null;

export function setApiKey(k: string | null, unauthorized?: () => void) {
  key = k;
  onUnauthorized = unauthorized ?? null;
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }
  /** The 1-based line a batch-file error names ("… line 2: …"), if any. */
  get line(): number | null {
    const m = /\bline (\d+)\b/i.exec(this.message);
    return m ? Number(m[1]) : null;
  }
}

const headers = (extra: Record<string, string> = {}): Record<string, string> => (key ? { authorization: `Bearer ${key}`, ...extra } : extra);

async function errorOf(res: Response): Promise<ApiError> {
  let body: ErrorBody | null = null;
  try {
    body = (await res.json()) as ErrorBody;
  } catch {
    /* not JSON: a proxy's page */
  }
  const e = body?.error;
  return new ApiError(e?.message ?? `${res.status} ${res.statusText}`, res.status, e?.code ?? null, e?.param ?? null);
}

function failed(e: ApiError): never {
  // A key revoked while signed in: back to the sign-in page, saying why.
  if (e.status === 401 && onUnauthorized) onUnauthorized();
  throw e;
}

export async function request(path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(`${BASE}${path}`, {
      method: init.method ?? "GET",
      headers: headers(init.body !== undefined ? { "content-type": "application/json" } : {}),
      body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
      signal: init.signal,
      cache: "no-store",
    });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError("The server could not be reached. Is it running?", 0, "network");
  }
  if (!res.ok) failed(await errorOf(res));
  return res;
}

export async function api<T>(path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
  return (await (await request(path, init)).json()) as T;
}

/** Saves a file's bytes under `filename` (fetched with the key, then handed to the browser). */
export async function download(fileId: string, filename: string): Promise<void> {
  const res = await request(`/files/${encodeURIComponent(fileId)}/content`);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/**
 * Uploads a file with progress. fetch cannot report upload progress, so
 * this one request uses XMLHttpRequest.
 */
export function upload(file: File, purpose: string, onProgress: (sent: number, total: number) => void): { done: Promise<unknown>; abort(): void } {
  const xhr = new XMLHttpRequest();
  const done = new Promise<unknown>((resolve, reject) => {
    xhr.open("POST", `${BASE}/files`);
    if (key) xhr.setRequestHeader("authorization", `Bearer ${key}`);
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onload = () => {
      let body: unknown = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        /* not JSON */
      }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body);
      const e = (body as ErrorBody | null)?.error;
      const err = new ApiError(e?.message ?? `Upload failed (${xhr.status})`, xhr.status, e?.code ?? null, e?.param ?? null);
      if (xhr.status === 401 && onUnauthorized) onUnauthorized();
      reject(err);
    };
    xhr.onerror = () => reject(new ApiError("The upload was interrupted: the server could not be reached.", 0, "network"));
    xhr.onabort = () => reject(new DOMException("aborted", "AbortError"));
    const form = new FormData();
    form.append("purpose", purpose);
    form.append("file", file, file.name);
    xhr.send(form);
  });
  return { done, abort: () => xhr.abort() };
}

/**
 * Follows GET /batches/{id}/events (docs/CONTRACT.md §12) with fetch and a stream
 * reader: EventSource cannot send the Authorization header. Calls `onBatch`
 * with every record; resolves when the stream ends (after a final state, or
 * when the connection drops), rejects when it cannot be opened.
 */
export async function followBatch(id: string, onBatch: (b: Batch) => void, signal: AbortSignal): Promise<void> {
  const res = await request(`/batches/${encodeURIComponent(id)}/events`, { signal });
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let end: number;
      while ((end = buf.indexOf("\n\n")) !== -1) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let event = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trimStart();
        }
        if (event === "batch" && data) onBatch(JSON.parse(data) as Batch);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * Reads a JSON Lines answer line by line (numbered from 1, blank lines
 * counted) until `onLine` returns false or `maxBytes` have come, then stops
 * the download: the page needs the first lines of a file that may be
 * gigabytes. Resolves true when the whole body was read.
 */
export async function readLines(res: Response, onLine: (line: string, n: number) => boolean, maxBytes: number): Promise<boolean> {
  if (!res.body) return true;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let n = 0;
  let read = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        if (buf !== "") onLine(buf, ++n);
        return true;
      }
      read += value.length;
      buf += value;
      let end: number;
      while ((end = buf.indexOf("\n")) !== -1) {
        const line = buf.slice(0, end).replace(/\r$/, "");
        buf = buf.slice(end + 1);
        if (!onLine(n === 0 ? line.replace(/^\uFEFF/, "") : line, ++n)) return false;
      }
      if (read >= maxBytes) return false;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

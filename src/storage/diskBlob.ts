// Where a Blob's bytes lie on this machine's disk, when they do: a file, or
// a slice of one. Bun serves such a blob itself (sendfile, Content-Length),
// and so can any thread of this process given the same path and range: a
// download relayed through a front thread (src/http/front/relay.ts) is sent
// by that thread from the file instead of through the relay socket and a
// copy (Bun drops a streamed body's Content-Length, ./sized.ts).
import { attached } from "../attached";

/** Bytes [start, end) of the file at `path`; end null: to the file's end. */
export interface DiskBytes {
  path: string;
  start: number;
  end: number | null;
}

const located = attached<DiskBytes>("diskBytes");

/** The file at `path` as a lazily read Blob that knows where it lies. */
export function diskBlob(path: string): Blob {
  const blob = Bun.file(path);
  located.set(blob, { path, start: 0, end: null });
  return blob;
}

/** `blob.slice(from, to)`, still knowing where it lies if `blob` did. */
export function sliceOf<S extends object>(blob: { slice(start?: number, end?: number): S }, from: number, to: number): S {
  const slice = blob.slice(from, to);
  const at = located.get(blob);
  if (at) located.set(slice, { path: at.path, start: at.start + from, end: at.start + to });
  return slice;
}

/** Where `body`'s bytes lie on the disk, if it is such a blob. */
export const diskBytesOf = (body: unknown): DiskBytes | undefined => (body !== null && typeof body === "object" ? located.get(body) : undefined);

const answers = attached<DiskBytes>("diskAnswer");

/** `new Response(body, init)`, noting where its bytes lie when `body` is a blob on the disk (see diskBytesOfAnswer). */
export function downloadResponse(body: Blob | Uint8Array<ArrayBuffer>, init: ResponseInit): Response {
  const res = new Response(body, init);
  const at = diskBytesOf(body);
  if (at) answers.set(res, at);
  return res;
}

/** Where an answer's body lies on the disk, if it was made by downloadResponse from such a blob. */
export const diskBytesOfAnswer = (res: Response): DiskBytes | undefined => answers.get(res);

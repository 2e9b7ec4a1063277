// Front thread → main thread: a request the front thread does not answer
// itself, sent whole, as it came, to the main thread's handler over its
// relay socket (Unix). Method, path, headers (Host included: the main
// thread decides on the path as it would for the client, src/http/path.ts)
// and body stream through unchanged; the answer streams back unchanged
// (SSE); a download from the disk is sent from its file here (fromDisk).
// The client's address goes in PEER_HEADER, for the log.
import { errorResponse, ApiError } from "../../errors";
import { withLength } from "../../storage/sized";
import { routable, targetOf } from "../path";
import type { DiskBytes } from "../../storage/diskBlob";
import { DISK_BYTES_HEADER, PEER_HEADER } from "./protocol";

/** Headers about the client's connection, not the request: the relay connection has its own. */
const HOP_BY_HOP = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"];


/** Where a front thread spools answers it must pass on with their Content-Length. */
export interface RelayTarget {
  socket: string;
  dataDir: string;
  /** The spool folder under dataDir, this thread's own. */
  spool: string;
}

/** `body`: the body when the front thread has read it already (a pass-through the main thread answers after all). */
export async function relay(request: Request, to: RelayTarget, peer: string | null, body?: string): Promise<Response> {
  const headers = new Headers(request.headers);
  for (const h of HOP_BY_HOP) headers.delete(h);
  if (peer) headers.set(PEER_HEADER, peer);
  else headers.delete(PEER_HEADER);
  const method = request.method;
  if (body !== undefined) headers.delete("content-length");
  let res: Response;
  try {
    // The target as the main thread's router and key check will read it.
    res = await fetch("http://offpeak.invalid" + targetOf(routable(request).url), {
      unix: to.socket,
      method,
      headers,
      body: body ?? (method === "GET" || method === "HEAD" ? undefined : request.body),
      redirect: "manual",
      signal: request.signal,
      decompress: false,
      timeout: false,
      duplex: "half",
    });
  } catch (e) {
    if (request.signal.aborted) return new Response(null, { status: 499 });
    // The main thread's socket did not answer (it is stopping).
    return errorResponse(new ApiError("internal_error", `Internal server error (relay: ${(e as Error)?.message ?? e})`), "req_unknown");
  }
  const disk = res.headers.get(DISK_BYTES_HEADER);
  if (disk !== null) return fromDisk(res, JSON.parse(decodeURIComponent(disk)) as DiskBytes);
  const length = res.headers.get("content-length");
  if (length === null || method === "HEAD" || !res.body) return res;
  // Bun drops the Content-Length of a body it streams (src/storage/sized.ts),
  // and a download must keep it (docs/CONTRACT.md §17): the answer is held whole here,
  // as the main thread held it, in memory or in this thread's spool.
  try {
    return new Response(await withLength(res.body, Number(length), to.dataDir, to.spool), { status: res.status, statusText: res.statusText, headers: res.headers });
  } catch (e) {
    if (request.signal.aborted) return new Response(null, { status: 499 });
    return errorResponse(new ApiError("internal_error", `Internal server error (relay: ${(e as Error)?.message ?? e})`), res.headers.get("x-request-id") ?? "req_unknown");
  }
}

/** A download the main thread answered from the disk: its bytes sent from the file here (sendfile, with their Content-Length). */
async function fromDisk(res: Response, at: DiskBytes): Promise<Response> {
  void res.body?.cancel().catch(() => {});
  const headers = new Headers(res.headers);
  headers.delete(DISK_BYTES_HEADER);
  const file = Bun.file(at.path);
  // Deleted since the main thread answered (a DELETE raced the download): gone, as it would be a moment later.
  if (!(await file.exists())) return errorResponse(new ApiError("not_found", "No such file: it was deleted"), headers.get("x-request-id") ?? "req_unknown");
  return new Response(at.end === null ? file : file.slice(at.start, at.end), { status: res.status, statusText: res.statusText, headers });
}

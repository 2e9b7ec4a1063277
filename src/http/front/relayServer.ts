// The main thread's relay socket: where front threads send every request
// they do not answer themselves (./relay.ts, ./protocol.ts), answered by the
// main thread's own handler exactly as on its public port.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PeerAddress } from "../../metrics/http";
import { diskBytesOfAnswer } from "../../storage/diskBlob";
import { DISK_BYTES_HEADER, PEER_HEADER } from "./protocol";

/** The main thread's handler (src/server.ts): its request line and metrics read the client's address from `server`. */
export interface Handler {
  fetch(request: Request, server: PeerAddress): Response | Promise<Response>;
}

export interface RelayServer {
  /** The socket's path, for the front threads. */
  socket: string;
  /** Stops it (requests under way are cut) and removes the socket. */
  stop(): Promise<void>;
}

/** Listens on the relay socket (one left by a process that did not stop is replaced). */
export async function startRelayServer(dataDir: string, handler: Handler): Promise<RelayServer> {
  const { path: socket, remove } = await relaySocket(dataDir);
  await rm(socket, { force: true });
  try {
    const server = Bun.serve({
      unix: socket,
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
      // As the public listener's: Bun's default (10 s) would cut an SSE stream between keep-alives. (Bun takes it on a Unix socket too; its types do not say so.)
      ...({ idleTimeout: 255 } as {}),
      fetch: async (request) => relayedAnswer(await handler.fetch(request, relayPeer)),
    });
    return {
      socket,
      async stop() {
        server.stop(true);
        await remove().catch(() => {});
      },
    };
  } catch (e) {
    await remove().catch(() => {});
    throw e;
  }
}

/**
 * Where the relay socket is: `relay.sock` in the data directory (0700), or,
 * when that path is too long for a socket address (108 bytes on Linux), in
 * a folder of its own under the system's temporary folder (made 0700 by
 * mkdtemp). Never an abstract socket: any local process could reach that.
 * `remove` takes it (and its folder) away.
 */
async function relaySocket(dataDir: string): Promise<{ path: string; remove: () => Promise<void> }> {
  const inDataDir = join(dataDir, "relay.sock");
  if (Buffer.byteLength(inDataDir) < 100) return { path: inDataDir, remove: () => rm(inDataDir, { force: true }) };
  const dir = await mkdtemp(join(tmpdir(), "offpeak-relay-"));
  return { path: join(dir, "relay.sock"), remove: () => rm(dir, { recursive: true, force: true }) };
}

/** The relay socket's requests carry the client's address in PEER_HEADER (set by a front thread; nobody else can reach the socket). */
const relayPeer: PeerAddress = {
  requestIP(r) {
    const address = r.headers.get(PEER_HEADER);
    return address ? { address } : null;
  },
};

/**
 * The main thread's answer as it goes back over the relay socket: a
 * download from the disk goes as where its bytes lie (DISK_BYTES_HEADER,
 * URI-encoded: a path may hold any character), for the front thread to
 * send from the file. Only this says so: any other answer that carries the
 * header loses it.
 */
function relayedAnswer(res: Response): Response {
  const disk = diskBytesOfAnswer(res);
  if (!disk && !res.headers.has(DISK_BYTES_HEADER)) return res;
  const headers = new Headers(res.headers);
  if (!disk) {
    headers.delete(DISK_BYTES_HEADER);
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
  }
  headers.set(DISK_BYTES_HEADER, encodeURIComponent(JSON.stringify(disk)));
  return new Response(null, { status: res.status, headers });
}

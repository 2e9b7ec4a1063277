// The connections of offpeak's own HTTP/1.1 client (./httpClient.ts): one
// pool per host and port, reused last-in first-out while fresh (the rule for
// connections an engine closes is at the top of ./httpClient.ts), and the
// cached start of each URL's request head.
import type { Socket } from "bun";

/** Idle connections older than this are closed instead of reused: uvicorn (vLLM) drops them after 5 s, and a request written as the server closes is lost. */
export const IDLE_MS = 2_000;
/** At most this many idle connections kept per upstream (more are closed); busy ones are bounded by the upstream's max_concurrency. */
const MAX_IDLE = 256;

/** The exchange a connection carries now (httpClient.ts Exchange): what the socket's events go to. */
export interface ConnUser {
  received(bytes: Buffer): void;
  writeRest(): void;
  connectionClosed(error?: Error): void;
}

/** Where a URL's requests go, parsed once per URL. */
export interface Target {
  origin: Origin;
  /** The start of every request's head, up to the content-length value. */
  headPrefix: string;
  /** Its length in bytes (the key may not be ASCII). */
  headPrefixBytes: number;
}

export class Origin {
  readonly idle: Conn[] = [];
  constructor(
    readonly hostname: string,
    readonly port: number,
  ) {}
}

const targets = new Map<string, Target>();
const origins = new Map<string, Origin>();

/** How many idle connections to the host and port of `url` are kept for reuse now (for /metrics-style reading and the tests). */
export function idleConnections(url: string): number {
  const u = new URL(url);
  return origins.get(`${u.hostname}:${Number(u.port || 80)}`)?.idle.length ?? 0;
}

export function targetOf(url: string, apiKey: string | null): Target {
  // The key is part of the cached head: the same for every call of one upstream and path.
  const key = apiKey ? url + "\n" + apiKey : url;
  let t = targets.get(key);
  if (t) return t;
  const u = new URL(url);
  const port = Number(u.port || 80);
  const originKey = `${u.hostname}:${port}`;
  let origin = origins.get(originKey);
  if (!origin) origins.set(originKey, (origin = new Origin(u.hostname.replace(/^\[|\]$/g, ""), port)));
  let head = `POST ${u.pathname}${u.search} HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\naccept-encoding: identity\r\nuser-agent: offpeak\r\n`;
  if (apiKey) {
    if (/[\r\n]/.test(apiKey)) throw new TypeError("the upstream's API key holds a line break");
    head += `authorization: Bearer ${apiKey}\r\n`;
  }
  head += "content-length: ";
  t = { origin, headPrefix: head, headPrefixBytes: Buffer.byteLength(head) };
  if (targets.size > 1024) targets.clear(); // bounded: a handful of upstreams and paths in practice
  targets.set(key, t);
  return t;
}

export class Conn {
  socket: Socket<Conn> | null = null;
  ex: ConnUser | null = null;
  idleSince = 0;
  /** How long it may stay idle and still be reused: IDLE_MS, or less when the engine said `Keep-Alive: timeout=N`. */
  reuseWithinMs = IDLE_MS;
  closed = false;
  constructor(readonly origin: Origin) {}

  close(): void {
    this.closed = true;
    this.socket?.terminate();
  }
}

const handlers = {
  data(socket: Socket<Conn>, bytes: Buffer) {
    const ex = socket.data?.ex;
    if (ex) ex.received(bytes);
    else socket.data?.close(); // bytes nobody asked for: this connection cannot be trusted
  },
  drain(socket: Socket<Conn>) {
    socket.data?.ex?.writeRest();
  },
  close(socket: Socket<Conn>, error?: Error) {
    const conn = socket.data;
    if (!conn) return;
    conn.closed = true;
    const i = conn.origin.idle.indexOf(conn);
    if (i >= 0) conn.origin.idle.splice(i, 1);
    conn.ex?.connectionClosed(error);
  },
  error(socket: Socket<Conn>, error: Error) {
    socket.data?.ex?.connectionClosed(error);
    socket.data?.close();
  },
};

export function connect(origin: Origin): Promise<Conn> {
  const conn = new Conn(origin);
  return Bun.connect<Conn>({ hostname: origin.hostname, port: origin.port, data: conn, socket: handlers }).then((socket) => {
    conn.socket = socket;
    socket.setNoDelay(true);
    return conn;
  });
}

export function takeIdle(origin: Origin): Conn | null {
  const now = performance.now();
  for (;;) {
    const conn = origin.idle.pop();
    if (!conn) return null;
    if (!conn.closed && now - conn.idleSince < conn.reuseWithinMs) return conn;
    conn.close();
  }
}

export function release(conn: Conn): void {
  conn.ex = null;
  if (conn.closed) return;
  const idle = conn.origin.idle;
  if (idle.length >= MAX_IDLE || conn.reuseWithinMs <= 0) return conn.close();
  conn.idleSince = performance.now();
  idle.push(conn);
}

/**
 * How long a connection may be reused after an answer with `Keep-Alive:
 * <value>`: a second less than the engine's `timeout=N` (its clock and ours
 * start a little apart), at most IDLE_MS; IDLE_MS when the value names no timeout.
 */
export function reuseWithin(value: string): number {
  const m = /(?:^|[\s,;])timeout\s*=\s*"?(\d{1,9})/i.exec(value);
  return m ? Math.max(0, Math.min(IDLE_MS, Number(m[1]) * 1000 - 1000)) : IDLE_MS;
}

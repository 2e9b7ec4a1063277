// A small HTTP/1.1 client for calls to plain-http upstreams (vLLM, llama.cpp
// server, Ollama on the same machine or network), interactive requests and
// batch lines alike (./transport.ts picks it): POST a JSON body, answer with
// the status, the headers and a body that streams as it arrives (an
// OwnAnswer: ./answer.ts says why not a Response).
//
// Why not fetch: Bun's fetch runs every call on its own "HTTP Client"
// thread and hands the request and the answer across threads. In the chat
// pass-through that thread cost 27–34 µs of CPU per request, about as much
// as everything offpeak's main thread does (bench/proxy-ab.ts; a naive
// Bun.serve proxy measured 59–67 µs a request with fetch, 36–37 with this
// kind of client on Bun.connect: the sockets live on the main thread's own
// event loop and the answer never changes threads).
//
// Scope, kept small on purpose: http: only (https and anything behind an
// HTTP proxy from the environment go through fetch, see canUseOwnClient),
// one request per connection at a time, keep-alive connections reused
// last-in first-out. Bodies: Content-Length, chunked, or up to the close;
// gzip/deflate are decoded (we ask for identity; a server may not listen).
// The caller's signal aborts the call (the connection is closed, not
// reused). Strict, as SPEC §17 asks: heads and chunked framing are judged
// as llhttp (Node's parser) judges them (a refused answer is an
// UpstreamProtocolError), and a request is sent again on a new connection
// only if not one byte of it was written on the old one. Backpressure: a
// streamed body pauses the socket while the reader is behind.
//
// Each thread has its own connections: a batch Worker's calls run on that
// Worker's event loop, as the main thread's do on its own.
import type { Socket } from "bun";
import type { AbortListener, CallAbort } from "./deadline";
import { OwnAnswer } from "./answer";
import { processEnv, type Env } from "../../env";

/** Idle connections older than this are closed instead of reused: uvicorn (vLLM) drops them after 5 s, and a request written as the server closes is lost. */
const IDLE_MS = 2_000;
/** At most this many idle connections kept per upstream (more are closed); busy ones are bounded by the upstream's max_concurrency. */
const MAX_IDLE = 256;
/** An answer's status line and headers may not be longer. */
const MAX_HEAD_BYTES = 64 * 1024;
/** A chunk-size or trailer line may not be longer. */
const MAX_LINE_BYTES = 4096;
/** A status line and headers that began to arrive must be whole within this (SPEC §17: never wait long on a head it cannot parse). */
const HEAD_DEADLINE_MS = 5_000;
/** The longest Content-Length taken (15 digits, under 2^53): llhttp refuses lengths that overflow; an absurd one would wait for bytes that never come. */
const LENGTH = /^\d{1,15}$/;
/** A header name: an RFC 9110 token. "Content-Length : 5" (space before the colon) is not one. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A control character other than HTAB, a lone CR or a bare LF: llhttp refuses these in a status line or header (no lenient flags). */
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;
/** The status line llhttp takes: HTTP/1.0 or 1.1, three digits, an optional reason of visible characters, spaces and tabs. */
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: [^]*)?$/;

/**
 * Whether calls to `baseUrl` go through this client: plain http and no
 * proxy set in the environment (Bun's fetch honours HTTP_PROXY; this client
 * does not speak to proxies).
 */
export function canUseOwnClient(baseUrl: string, env: Env = processEnv()): boolean {
  if (env.HTTP_PROXY || env.http_proxy) return false;
  try {
    const u = new URL(baseUrl);
    return u.protocol === "http:" && !u.username && !u.password;
  } catch {
    return false;
  }
}

/** The call failed without a whole answer: no connection, or it broke off. `code`: the system's (ECONNREFUSED…) when there was one. */
export class UpstreamConnectionError extends Error {
  override name = "UpstreamConnectionError";
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** The upstream answered, but not with HTTP that llhttp would take (SPEC §17), or not within the head deadline. */
export class UpstreamProtocolError extends UpstreamConnectionError {
  override name = "UpstreamProtocolError";
}

/** Where a URL's requests go, parsed once per URL. */
interface Target {
  origin: Origin;
  /** The start of every request's head, up to the content-length value. */
  headPrefix: string;
  /** Its length in bytes (the key may not be ASCII). */
  headPrefixBytes: number;
}

class Origin {
  readonly idle: Conn[] = [];
  constructor(
    readonly hostname: string,
    readonly port: number,
  ) {}
}

const targets = new Map<string, Target>();
const origins = new Map<string, Origin>();

function targetOf(url: string, apiKey: string | null): Target {
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

/**
 * POSTs the JSON `body` to `url` (http:), with the upstream's key if any,
 * and answers once the status and headers have arrived. `abort` (the call's
 * Deadline) ends it at any point.
 */
export function postOwn(url: string, apiKey: string | null, body: string, abort: CallAbort): Promise<OwnAnswer> {
  if (abort.aborted) return Promise.reject(abort.reason);
  const target = targetOf(url, apiKey);
  return new Promise<OwnAnswer>((resolve, reject) => {
    const ex = new Exchange(target, body, abort, resolve, reject);
    ex.start();
  });
}

const enum State {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailer,
  UntilClose,
  Done,
}

class Conn {
  socket: Socket<Conn> | null = null;
  ex: Exchange | null = null;
  idleSince = 0;
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

function connect(origin: Origin): Promise<Conn> {
  const conn = new Conn(origin);
  return Bun.connect<Conn>({ hostname: origin.hostname, port: origin.port, data: conn, socket: handlers }).then((socket) => {
    conn.socket = socket;
    socket.setNoDelay(true);
    return conn;
  });
}

function takeIdle(origin: Origin): Conn | null {
  const now = performance.now();
  for (;;) {
    const conn = origin.idle.pop();
    if (!conn) return null;
    if (!conn.closed && now - conn.idleSince < IDLE_MS) return conn;
    conn.close();
  }
}

function release(conn: Conn): void {
  conn.ex = null;
  if (conn.closed) return;
  const idle = conn.origin.idle;
  if (idle.length >= MAX_IDLE) return conn.close();
  conn.idleSince = performance.now();
  idle.push(conn);
}

const latin1 = new TextDecoder("latin1");

/** Bytes [from, to) of `b` as a plain Uint8Array view: Buffer#subarray builds a Buffer through its species constructor (3.5% of the main thread in the chat pass-through). */
function view(b: Uint8Array, from: number, to: number): Uint8Array {
  return from === 0 && to === b.length ? b : new Uint8Array(b.buffer, b.byteOffset + from, to - from);
}

/** One request and its answer, on one connection (or two: see connectionClosed). */
class Exchange implements AbortListener {
  private conn: Conn | null = null;
  private state = State.Head;
  private head: Buffer | null = null;
  private remaining = 0;
  private line = "";
  private keepAlive = true;
  private answered = false;
  private gotBytes = false;
  private retried = false;
  /** Some byte of the request went to the socket: from then on the engine may have it, so it is never sent again. */
  private wrote = false;
  private headTimer: ReturnType<typeof setTimeout> | null = null;
  private finished = false;
  private unwritten: Buffer | null = null;
  private controller: ReadableStreamDefaultController<Uint8Array> | null = null;

  constructor(
    private readonly target: Target,
    private readonly body: string,
    private readonly abort: CallAbort,
    private readonly resolve: (r: OwnAnswer) => void,
    private readonly reject: (e: unknown) => void,
  ) {}

  start(): void {
    this.abort.listen(this);
    this.send();
  }

  onAbort(reason: unknown): void {
    this.fail(reason ?? new DOMException("aborted", "AbortError"));
  }

  /** On a kept connection if there is one (not for the retry: `fresh`). */
  private send(fresh = false): void {
    const conn = fresh ? null : takeIdle(this.target.origin);
    if (conn) return this.sendOn(conn);
    connect(this.target.origin).then(
      (c) => {
        if (this.finished) return c.close(); // aborted while connecting
        this.sendOn(c);
      },
      (e: Error & { code?: string }) => this.fail(new UpstreamConnectionError(e?.message ?? String(e), e?.code)),
    );
  }

  private sendOn(conn: Conn): void {
    this.conn = conn;
    conn.ex = this;
    const bodyBytes = Buffer.byteLength(this.body);
    const length = String(bodyBytes);
    const text = this.target.headPrefix + length + "\r\n\r\n" + this.body;
    const written = conn.socket!.write(text);
    if (written > 0) this.wrote = true;
    // Partly written (a large body, a slow reader): the rest goes on drain.
    if (written < this.target.headPrefixBytes + length.length + 4 + bodyBytes) this.unwritten = Buffer.from(text).subarray(Math.max(0, written));
  }

  writeRest(): void {
    const rest = this.unwritten;
    if (!rest || !this.conn?.socket) return;
    const n = this.conn.socket.write(rest);
    if (n > 0) this.wrote = true;
    this.unwritten = n >= rest.length ? null : rest.subarray(Math.max(0, n));
  }

  received(bytes: Buffer): void {
    this.gotBytes = true;
    try {
      this.parse(bytes);
    } catch (e) {
      this.fail(new UpstreamProtocolError((e as Error).message));
    }
  }

  private parse(bytes: Buffer): void {
    const conn = this.conn;
    let at = 0;
    if (this.state === State.Head) {
      at = this.readHead(bytes);
      if (at < 0) return;
    }
    while (at < bytes.length && this.state !== State.Done) {
      switch (this.state) {
        case State.Length: {
          const n = Math.min(this.remaining, bytes.length - at);
          this.deliver(view(bytes, at, at + n));
          at += n;
          this.remaining -= n;
          if (this.remaining === 0) this.complete();
          break;
        }
        case State.UntilClose:
          this.deliver(view(bytes, at, bytes.length));
          at = bytes.length;
          break;
        case State.ChunkData: {
          const n = Math.min(this.remaining, bytes.length - at);
          this.deliver(view(bytes, at, at + n));
          at += n;
          this.remaining -= n;
          if (this.remaining === 0) this.state = State.ChunkEnd;
          break;
        }
        case State.ChunkSize:
        case State.ChunkEnd:
        case State.Trailer: {
          const nl = bytes.indexOf(10, at);
          const end = nl < 0 ? bytes.length : nl;
          this.line += latin1.decode(view(bytes, at, end));
          if (this.line.length > MAX_LINE_BYTES) throw new Error("upstream sent a malformed chunked body (a line too long)");
          at = nl < 0 ? bytes.length : nl + 1;
          if (nl >= 0) {
            // llhttp wants CRLF here too: a bare LF is refused, as is any other control character.
            if (!this.line.endsWith("\r")) throw new Error("upstream sent a malformed chunked body (a line without CR before its LF)");
            const line = this.line.slice(0, -1);
            this.line = "";
            if (CONTROL.test(line) || line.includes("\r")) throw new Error("upstream sent a malformed chunked body (a control character in a line)");
            this.lineDone(line);
          }
          break;
        }
      }
    }
    // Bytes past the end of the answer: not ours to read, the connection is done.
    if (at < bytes.length && this.state === State.Done) conn?.close();
  }

  private lineDone(line: string): void {
    if (this.state === State.ChunkEnd) {
      if (line !== "") throw new Error("upstream sent a malformed chunked body (no CRLF after a chunk)");
      this.state = State.ChunkSize;
    } else if (this.state === State.ChunkSize) {
      const semi = line.indexOf(";");
      const hex = (semi < 0 ? line : line.slice(0, semi)).trim();
      if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) throw new Error("upstream sent a malformed chunked body (a bad chunk size)");
      const size = parseInt(hex, 16);
      if (size === 0) this.state = State.Trailer;
      else {
        this.remaining = size;
        this.state = State.ChunkData;
      }
    } else if (line === "") this.complete(); // the blank line after the trailers
  }

  /** Reads the status line and headers; returns where the body starts in `bytes`, or -1 if the head is not complete yet. */
  private readHead(bytes: Buffer): number {
    let buf = bytes;
    let from = 0;
    if (this.head) {
      from = Math.max(0, this.head.length - 3);
      buf = Buffer.concat([this.head, bytes]);
    }
    const end = buf.indexOf("\r\n\r\n", from);
    if (end < 0) {
      if (buf.length > MAX_HEAD_BYTES) throw new Error(`upstream sent a status line and headers longer than ${MAX_HEAD_BYTES} bytes`);
      // What can be judged already is judged now, not at the head deadline.
      if (buf.length >= 5 && buf.toString("latin1", 0, 5) !== "HTTP/") throw new Error("upstream did not answer with HTTP/1.x");
      const lf = buf.indexOf(10, Math.max(1, from));
      if (lf > 0 && buf[lf - 1] !== 13) throw new Error("upstream sent a head with a bare LF line ending");
      this.head = buf;
      this.headTimer ??= setTimeout(() => this.fail(new UpstreamProtocolError(`upstream did not complete its status line and headers within ${HEAD_DEADLINE_MS} ms`)), HEAD_DEADLINE_MS);
      return -1;
    }
    this.head = null;
    if (this.headTimer) {
      clearTimeout(this.headTimer);
      this.headTimer = null;
    }
    const bodyAt = end + 4 - (buf.length - bytes.length); // where the body starts in `bytes`
    const lines = buf.toString("latin1", 0, end).split("\r\n");
    // The checks llhttp makes without lenient flags (Node's http client): a
    // lone CR, a bare LF, NUL or another control character anywhere in the
    // head; a folded line; a header name that is not a token (a space before
    // the colon); Content-Length that is not digits, too long, or twice;
    // Content-Length beside Transfer-Encoding; a Transfer-Encoding other than
    // chunked. Any of them makes the answer a 502, never a 500 or a hang.
    const statusLine = lines[0]!;
    const m = STATUS_LINE.exec(statusLine);
    if (!m || CONTROL.test(statusLine)) throw new Error("upstream did not answer with a valid HTTP/1.x status line");
    const status = Number(m[2]);
    if (status >= 100 && status < 200) {
      // 100 Continue, 103 Early Hints: a final answer follows.
      if (bodyAt >= bytes.length) return -1;
      const next = this.readHead(bytes.subarray(bodyAt));
      return next < 0 ? -1 : bodyAt + next;
    }
    const headers: [string, string][] = [];
    let length = -1;
    let chunked = false;
    let transferEncoding = false;
    let encoding = "";
    this.keepAlive = m[1] === "1";
    for (let i = 1; i < lines.length; i++) {
      const l = lines[i]!;
      if (CONTROL.test(l)) throw new Error("upstream sent a control character, a lone CR or a bare LF in a header");
      const colon = l.indexOf(":");
      const rawName = colon > 0 ? l.slice(0, colon) : "";
      // A line starting with a space or tab is a folded one (obs-fold): not a token either.
      if (!TOKEN.test(rawName)) throw new Error("upstream sent a malformed header line");
      const name = rawName.toLowerCase();
      const value = l.slice(colon + 1).trim();
      if (name === "content-length") {
        if (!LENGTH.test(value) || length >= 0) throw new Error("upstream sent an invalid Content-Length");
        length = Number(value);
      } else if (name === "transfer-encoding") {
        if (transferEncoding || value.toLowerCase() !== "chunked") throw new Error(`upstream sent Transfer-Encoding ${value.slice(0, 40)}, which offpeak does not take`);
        transferEncoding = chunked = true;
      } else if (name === "connection") {
        const v = value.toLowerCase();
        if (v.includes("close")) this.keepAlive = false;
        else if (v.includes("keep-alive")) this.keepAlive = true;
      } else if (name === "content-encoding") encoding = value.toLowerCase();
      else if (name !== "keep-alive") headers.push([name, value]);
    }
    if (chunked && length >= 0) throw new Error("upstream sent both Content-Length and Transfer-Encoding");
    if (encoding && encoding !== "identity" && encoding !== "gzip" && encoding !== "deflate")
      throw new Error(`upstream answered with Content-Encoding ${encoding}, which offpeak does not decode`);
    const noBody = status === 204 || status === 304;
    if (noBody) this.state = State.Done;
    else if (chunked) this.state = State.ChunkSize;
    else if (length >= 0) {
      this.state = State.Length;
      this.remaining = length;
    } else {
      this.state = State.UntilClose;
      this.keepAlive = false;
    }
    this.answered = true;
    if (noBody || (this.state === State.Length && length === 0)) {
      this.resolve(new OwnAnswer(status, headers, null, null));
      this.complete();
      return bytes.length;
    }
    // The whole body is here already (the usual case for a JSON answer): no stream needed.
    if (!encoding && this.state === State.Length && bytes.length - bodyAt >= length) {
      this.resolve(new OwnAnswer(status, headers, view(bytes, bodyAt, bodyAt + length), null));
      this.complete();
      return bodyAt + length;
    }
    const raw = new ReadableStream<Uint8Array>(
      {
        start: (c) => {
          this.controller = c;
        },
        pull: () => {
          this.conn?.socket?.resume();
        },
        cancel: () => {
          // The reader gave up mid-answer: the rest would arrive on a
          // connection nobody reads, so it is closed (taken before finish()
          // forgets it).
          const conn = this.conn;
          this.finish();
          if (conn) {
            conn.ex = null;
            conn.close();
          }
        },
      },
      { highWaterMark: 4 },
    );
    const body = encoding && encoding !== "identity" ? raw.pipeThrough(new DecompressionStream(encoding as "gzip" | "deflate") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>) : raw;
    this.resolve(new OwnAnswer(status, headers, null, body));
    return bodyAt;
  }

  private deliver(bytes: Uint8Array): void {
    const c = this.controller;
    if (!c || bytes.length === 0) return;
    c.enqueue(bytes); // Bun hands each data callback fresh bytes of its own: no copy needed
    if ((c.desiredSize ?? 1) <= 0) this.conn?.socket?.pause();
  }

  /** The answer has been read whole. */
  private complete(): void {
    const conn = this.conn;
    const c = this.controller;
    this.finish();
    if (c) {
      try {
        c.close();
      } catch {
        // cancelled by its reader
      }
    }
    if (!conn) return;
    conn.socket?.resume();
    if (this.keepAlive && !this.unwritten) release(conn);
    else {
      conn.ex = null;
      conn.close();
    }
  }

  /** The connection closed: the end of an answer read up to the close, a stale keep-alive connection (tried again once), or a failure. */
  connectionClosed(error?: Error): void {
    if (this.finished) return;
    if (this.state === State.UntilClose && !error) return this.complete();
    const conn = this.conn;
    if (conn && !this.wrote && !this.gotBytes && !this.retried && !this.abort.aborted) {
      // The connection closed before one byte of the request reached it (a
      // kept one the upstream had just closed): the engine cannot have seen
      // the request, so it goes again on a new connection. Once any byte was
      // written, the engine may be running it: a failure, never a resend.
      this.retried = true;
      conn.ex = null;
      this.conn = null;
      this.unwritten = null;
      return this.send(true);
    }
    const message = error?.message ?? (this.answered ? "upstream closed the connection before the end of its answer" : "upstream closed the connection without answering");
    this.fail(new UpstreamConnectionError(message, (error as { code?: string } | undefined)?.code));
  }

  fail(error: unknown): void {
    if (this.finished) return;
    const conn = this.conn;
    const c = this.controller;
    this.finish();
    if (!this.answered) this.reject(error);
    else if (c) {
      try {
        c.error(error);
      } catch {
        // already closed or cancelled
      }
    }
    if (conn) {
      conn.ex = null;
      conn.close();
    }
  }

  private finish(): void {
    if (this.headTimer) {
      clearTimeout(this.headTimer);
      this.headTimer = null;
    }
    this.finished = true;
    this.state = State.Done;
    this.controller = null;
    this.abort.listen(null);
    this.conn = null;
  }
}

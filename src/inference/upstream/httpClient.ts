// A small HTTP/1.1 client for calls to plain-http upstreams (vLLM, llama.cpp
// server, Ollama on the same machine or network), interactive requests and
// batch lines alike (./transport.ts picks it): POST a JSON body, answer with
// the status, the headers and a body that streams as it arrives (an
// OwnAnswer: ./answer.ts says why not a Response).
//
// Why not fetch: Bun's fetch runs every call on its own "HTTP Client"
// thread and hands the request and the answer across threads. In the chat
// pass-through that thread cost 27–34 µs of CPU per request, about as much
// as everything offpeak's main thread does (bench/ab/proxy-ab.ts; a naive
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
// reused). Strict, as docs/CONTRACT.md §17 asks: heads and chunked framing are judged
// as llhttp (Node's parser) judges them (a refused answer is an
// UpstreamProtocolError). Backpressure: a streamed body pauses the socket
// while the reader is behind.
//
// A kept connection the engine closes. Engines close idle connections
// (uvicorn, under vLLM, after 5 s; llama.cpp's server after 5 s too). The
// rule, decided so that no request runs twice at an engine:
//   - a connection whose close this client has seen is never used again;
//   - a connection is reused only while idle for less than IDLE_MS, and less
//     than the engine's own `Keep-Alive: timeout=N` less a second when it
//     sends one: well before the engine would close it;
//   - a request is sent again on a new connection only if not one byte of it
//     was written on the old one (Bun refused the write: the socket was
//     already gone);
//   - once a byte is written, a close before any byte of answer is an
//     UpstreamConnectionError, never a resend here: the engine may have read
//     the request and be running it (an engine that closes as the request
//     arrives, unread, looks the same from this side). The batch engine
//     retries the line as it retries any failed attempt; an interactive
//     client gets a 502.
//
// Each thread has its own connections: a batch Worker's calls run on that
// Worker's event loop, as the main thread's do on its own.
//
// Over 400 lines: the Exchange below is one state machine (the request
// written, the answer's head, its body's framing, the connection's end) and
// reads best whole; the connections are in ./httpPool.ts, the byte-level
// judging of heads in ./httpWire.ts.
import type { AbortListener, CallAbort } from "./deadline";
import { OwnAnswer } from "./answer";
import { Conn, connect, release, reuseWithin, takeIdle, targetOf, IDLE_MS, type Target } from "./httpPool";
import { CONTROL, HEAD_END, TOKEN_BYTE, WholeAnswer, isName, lineEnd, pairsOf, statusOf, view, type SliceBuffer } from "./httpWire";
import type { Env } from "../../config";

export { idleConnections, reuseWithin } from "./httpPool";

/** An answer's status line and headers may not be longer. */
const MAX_HEAD_BYTES = 64 * 1024;
/** A chunk-size or trailer line may not be longer. */
const MAX_LINE_BYTES = 4096;
/** A status line and headers that began to arrive must be whole within this (docs/CONTRACT.md §17: never wait long on a head it cannot parse). */
const HEAD_DEADLINE_MS = 5_000;
/** The most digits a Content-Length may have (15, under 2^53): llhttp refuses lengths that overflow; an absurd one would wait for bytes that never come. */
const MAX_LENGTH_DIGITS = 15;
/**
 * Whether calls to `baseUrl` go through this client: plain http and no
 * proxy set in the environment (Bun's fetch honours HTTP_PROXY; this client
 * does not speak to proxies).
 */
export function canUseOwnClient(baseUrl: string, env: Env): boolean {
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

/** The upstream answered, but not with HTTP that llhttp would take (docs/CONTRACT.md §17), or not within the head deadline. */
export class UpstreamProtocolError extends UpstreamConnectionError {
  override name = "UpstreamProtocolError";
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

class Exchange implements AbortListener {
  private conn: Conn | null = null;
  private state = State.Head;
  private head: Buffer | null = null;
  private remaining = 0;
  private line = "";
  private keepAlive = true;
  /** From this answer's `Keep-Alive` header, if any: how long its connection may be reused (Conn.reuseWithinMs). */
  private reuseWithinMs = IDLE_MS;
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
          this.line += (bytes as SliceBuffer).latin1Slice(at, end);
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
    const end = buf.indexOf(HEAD_END, from);
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
    // The checks llhttp makes without lenient flags (Node's http client): a
    // lone CR, a bare LF, NUL or another control character anywhere in the
    // head; a folded line; a header name that is not a token (a space before
    // the colon); Content-Length that is not digits, too long, or twice;
    // Content-Length beside Transfer-Encoding; a Transfer-Encoding other than
    // chunked. Any of them makes the answer a 502, never a 500 or a hang.
    // Read straight from the bytes, one pass over each line (no split, no
    // regular expression per line): this runs for every upstream answer.
    const statusEnd = lineEnd(buf, 0, end);
    const status = statusOf(buf, statusEnd);
    if (status < 0) throw new Error("upstream did not answer with a valid HTTP/1.x status line");
    if (status >= 100 && status < 200) {
      // 100 Continue, 103 Early Hints: a final answer follows.
      if (bodyAt >= bytes.length) return -1;
      const next = this.readHead(bytes.subarray(bodyAt));
      return next < 0 ? -1 : bodyAt + next;
    }
    // Where each header passed on lies in `buf` (name from, to; value from,
    // to): made into strings only if someone reads the headers, which nobody
    // does for most 2xx answers.
    const kept: number[] = [];
    let length = -1;
    let chunked = false;
    let transferEncoding = false;
    let encoding = "";
    this.keepAlive = buf[7] === 49; // HTTP/1.1 ("1"); HTTP/1.0 closes unless it says keep-alive
    for (let at = statusEnd + 2; at < end; ) {
      const eol = lineEnd(buf, at, end);
      // The name: a token up to the colon. A line starting with a space or
      // tab is a folded one (obs-fold): not a token either.
      let i = at;
      while (i < eol && TOKEN_BYTE[buf[i]!] === 1) i++;
      if (i === at || i === eol || buf[i] !== 58) throw new Error("upstream sent a malformed header line");
      // The value without the spaces and tabs around it (OWS).
      let from = i + 1;
      let to = eol;
      while (from < to && (buf[from] === 32 || buf[from] === 9)) from++;
      while (to > from && (buf[to - 1] === 32 || buf[to - 1] === 9)) to--;
      const nameFrom = at;
      at = eol + 2;
      if (isName(buf, nameFrom, i, "content-length")) {
        if (length >= 0 || to - from > MAX_LENGTH_DIGITS || to === from) throw new Error("upstream sent an invalid Content-Length");
        let n = 0;
        for (let k = from; k < to; k++) {
          const d = buf[k]! - 48;
          if (d < 0 || d > 9) throw new Error("upstream sent an invalid Content-Length");
          n = n * 10 + d;
        }
        length = n;
      } else if (isName(buf, nameFrom, i, "transfer-encoding")) {
        const value = (buf as SliceBuffer).latin1Slice(from, to);
        if (transferEncoding || value.toLowerCase() !== "chunked") throw new Error(`upstream sent Transfer-Encoding ${value.slice(0, 40)}, which offpeak does not take`);
        transferEncoding = chunked = true;
      } else if (isName(buf, nameFrom, i, "connection")) {
        const v = (buf as SliceBuffer).latin1Slice(from, to).toLowerCase();
        if (v.includes("close")) this.keepAlive = false;
        else if (v.includes("keep-alive")) this.keepAlive = true;
      } else if (isName(buf, nameFrom, i, "content-encoding")) encoding = (buf as SliceBuffer).latin1Slice(from, to).toLowerCase();
      else if (isName(buf, nameFrom, i, "keep-alive")) this.reuseWithinMs = reuseWithin((buf as SliceBuffer).latin1Slice(from, to));
      else kept.push(nameFrom, i, from, to);
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
      this.resolve(new OwnAnswer(status, pairsOf(buf, kept), null, null));
      this.complete();
      return bytes.length;
    }
    // The whole body is here already (the usual case for a JSON answer): no stream needed.
    if (!encoding && this.state === State.Length && bytes.length - bodyAt >= length) {
      this.resolve(new WholeAnswer(status, buf, kept, bytes, bodyAt, bodyAt + length));
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
    this.resolve(new OwnAnswer(status, pairsOf(buf, kept), null, body));
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
    conn.reuseWithinMs = this.reuseWithinMs;
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

// offpeak's own HTTP/1.1 client for plain-http upstreams (src/inference/upstream/httpClient.ts),
// against a scripted TCP server on loopback that writes exact bytes: framing
// (Content-Length, chunked, up to the close), answers split anywhere,
// keep-alive reuse and its stale-connection retry, aborts, failures; and
// through a real server, that the setting picks the client for interactive
// calls and batch lines alike.
import { afterAll, describe, expect, test } from "bun:test";
import type { Socket, TCPSocketListener } from "bun";
import { gzipSync } from "node:zlib";
import type { CallAbort } from "../src/inference/upstream/deadline";
import { canUseOwnClient, idleConnections, postOwn as postOwnAbort, reuseWithin, UpstreamConnectionError } from "../src/inference/upstream/httpClient";

/** The client listens to a CallAbort (a Deadline in offpeak); the tests abort through signals. */
function abortOfSignal(signal: AbortSignal): CallAbort {
  let current: (() => void) | null = null;
  return {
    get aborted() {
      return signal.aborted;
    },
    get reason() {
      return signal.reason;
    },
    listen(listener) {
      if (current) signal.removeEventListener("abort", current);
      current = listener ? () => listener.onAbort(signal.reason) : null;
      if (current) signal.addEventListener("abort", current, { once: true });
    },
  };
}
const postOwn = (url: string, apiKey: string | null, body: string, signal: AbortSignal) => postOwnAbort(url, apiKey, body, abortOfSignal(signal));
import { freshDataDir, startTestServer } from "./helpers/server";
import { chatReq, createBatch, readResults, waitBatch } from "./helpers/batches";
import { ConfigError, resolveConfig } from "../src/config";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SCENARIO_MS, waitFor } from "./helpers/wait";

interface Received {
  head: string;
  body: Buffer;
  conn: number;
}

/** One request read off a connection: head, then Content-Length bytes. */
class RequestReader {
  private buf = Buffer.alloc(0);
  push(d: Buffer): { head: string; body: Buffer }[] {
    this.buf = Buffer.concat([this.buf, d]);
    const out: { head: string; body: Buffer }[] = [];
    for (;;) {
      const end = this.buf.indexOf("\r\n\r\n");
      if (end < 0) return out;
      const head = this.buf.toString("latin1", 0, end);
      const len = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
      if (this.buf.length < end + 4 + len) return out;
      out.push({ head, body: this.buf.subarray(end + 4, end + 4 + len) });
      this.buf = this.buf.subarray(end + 4 + len);
    }
  }
}

type Answer = (req: Received, socket: Socket<ConnState>) => void | Promise<void>;
interface ConnState {
  id: number;
  reader: RequestReader;
  served: number;
}

/** A TCP server that hands each complete request to `answer`, which writes whatever bytes it likes. */
function scripted(answer: Answer) {
  const received: Received[] = [];
  let conns = 0;
  let closed = 0;
  const server: TCPSocketListener<ConnState> = Bun.listen<ConnState>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        s.data = { id: ++conns, reader: new RequestReader(), served: 0 };
      },
      close() {
        closed++;
      },
      async data(s, d) {
        for (const r of s.data.reader.push(d)) {
          const req = { ...r, conn: s.data.id };
          received.push(req);
          s.data.served++;
          await answer(req, s);
        }
      },
    },
  });
  servers.push(server);
  return { url: `http://127.0.0.1:${server.port}/v1/chat/completions`, received, connections: () => conns, closed: () => closed, server };
}
const servers: TCPSocketListener<ConnState>[] = [];
afterAll(() => {
  for (const s of servers) s.stop(true);
});

const never = () => new AbortController().signal;

const ok = (body: string, extra = "") => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n${extra}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const chunked = (parts: string[], extra = "") =>
  `HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n${extra}transfer-encoding: chunked\r\n\r\n` +
  parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join("") +
  "0\r\n\r\n";

/** Writes `text` in pieces cut at `cuts`, a few ms apart, so that they arrive as separate reads. */
async function writeInPieces(s: Socket<ConnState>, text: string, cuts: number[]) {
  const bytes = Buffer.from(text);
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    s.write(bytes.subarray(at, cut));
    at = cut;
    await Bun.sleep(4);
  }
}

describe("framing", () => {
  test("Content-Length: status, headers and body; the request as sent; the connection is reused", async () => {
    const up = scripted((_r, s) => void s.write(ok('{"ok":true}', "x-request-id: up-1\r\nretry-after: 3\r\n")));
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "héllo" }] });
    const a = await postOwn(up.url, "sk-up", body, never());
    expect(a.status).toBe(200);
    expect(a.headers.get("content-type")).toBe("application/json");
    expect(a.headers.get("x-request-id")).toBe("up-1");
    expect(a.headers.get("retry-after")).toBe("3");
    expect(await a.text()).toBe('{"ok":true}');
    const b = await postOwn(up.url, "sk-up", body, never());
    expect(await b.json()).toEqual({ ok: true });
    expect(up.connections()).toBe(1);
    const req = up.received[0]!;
    expect(req.head.split("\r\n")[0]).toBe("POST /v1/chat/completions HTTP/1.1");
    expect(req.head).toContain("\r\nauthorization: Bearer sk-up");
    expect(req.head).toContain("\r\ncontent-type: application/json");
    expect(req.head).toContain(`\r\nhost: 127.0.0.1:${up.server.port}`);
    expect(req.body.toString()).toBe(body); // byte for byte, UTF-8
  });

  test("the answer object: headers by any case, repeated ones joined; a whole body also reads as a stream; 204 has no body", async () => {
    const up = scripted((_r, s) => {
      if (up.received.length === 2) return void s.write("HTTP/1.1 204 No Content\r\n\r\n");
      s.write(ok('{"a":1}', "X-Multi: one\r\nx-multi: two\r\n"));
    });
    const a = await postOwn(up.url, null, "{}", never());
    expect([a.ok, a.headers.get("X-MULTI"), a.headers.get("content-type"), a.headers.get("absent")]).toEqual([true, "one, two", "application/json", null]);
    expect(new TextDecoder().decode((await a.body!.getReader().read()).value)).toBe('{"a":1}');
    const b = await postOwn(up.url, null, "{}", never());
    expect([b.status, b.ok, b.body]).toEqual([204, true, null]);
    expect(await b.text()).toBe("");
  });

  test("an answer split anywhere (status line, the blank line, the body, a chunk-size line, a chunk's CRLF) reads the same", async () => {
    const whole = ok('{"content":"split me"}');
    const chunks = chunked(["data: one\n\n", "data: two\n\n"], "x-a: b\r\n");
    const plans: [string, number[]][] = [
      [whole, [3, 10]],
      [whole, [whole.indexOf("\r\n\r\n") + 1, whole.indexOf("\r\n\r\n") + 3]],
      [whole, [whole.length - 5]],
      [chunks, [chunks.indexOf("\r\n\r\n") + 4 + 1]],
      [chunks, [chunks.indexOf("data: one") + 4, chunks.indexOf("data: one") + 12]],
      [chunks, [chunks.length - 3, chunks.length - 1]],
    ];
    for (const [text, cuts] of plans) {
      const up = scripted((_r, s) => writeInPieces(s, text, cuts));
      const res = await postOwn(up.url, null, "{}", never());
      const expected = text === whole ? '{"content":"split me"}' : "data: one\n\ndata: two\n\n";
      expect(await res.text()).toBe(expected);
      // And the connection is still good for the next request.
      const again = await postOwn(up.url, null, "{}", never());
      expect(await again.text()).toBe(expected);
      expect(up.connections()).toBe(1);
    }
  });

  test("chunked: extensions and trailers are skipped; each chunk can be read before the next is sent", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const up = scripted(async (_r, s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5;name=value\r\nfirst\r\n");
      await gate;
      s.write("6\r\nsecond\r\n0\r\nx-trailer: t\r\n\r\n");
    });
    const res = await postOwn(up.url, null, "{}", never());
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("first");
    release();
    let rest = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    expect(rest).toBe("second");
    expect(await (await postOwn(up.url, null, "{}", never())).text()).toBe("first" + "second");
    expect(up.connections()).toBe(1);
  });

  test("no length and no chunking: the body runs to the close, and that connection is not reused", async () => {
    const up = scripted(async (_r, s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"until\":");
      await Bun.sleep(5);
      s.end('"close"}');
    });
    expect(await (await postOwn(up.url, null, "{}", never())).json()).toEqual({ until: "close" });
    expect(await (await postOwn(up.url, null, "{}", never())).json()).toEqual({ until: "close" });
    expect(up.connections()).toBe(2);
  });

  test("Connection: close and HTTP/1.0 answers are not reused; keep-alive ones are", async () => {
    const up = scripted((r, s) => {
      const n = up.received.length;
      if (n === 1) s.write(ok("1", "connection: close\r\n"));
      else if (n === 2) s.write(ok("2").replace("HTTP/1.1", "HTTP/1.0"));
      else if (n === 3) s.write(ok("3").replace("HTTP/1.1", "HTTP/1.0").replace("\r\n\r\n", "\r\nconnection: keep-alive\r\n\r\n"));
      else s.write(ok(String(n)));
      void r;
    });
    for (const want of ["1", "2", "3", "4"]) expect(await (await postOwn(up.url, null, "{}", never())).text()).toBe(want);
    // 1 closes, 2 closes, 3 stays open for 4.
    expect(up.received.map((r) => r.conn)).toEqual([1, 2, 3, 3]);
  });

  test("1xx answers before the final one are skipped; 204 has no body; a zero Content-Length is an empty body", async () => {
    const up = scripted((_r, s) => {
      const n = up.received.length;
      if (n === 1) s.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + ok('{"after":"1xx"}'));
      else if (n === 2) s.write("HTTP/1.1 204 No Content\r\nx-n: 2\r\n\r\n");
      else s.write("HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ncontent-length: 0\r\n\r\n");
    });
    const a = await postOwn(up.url, null, "{}", never());
    expect(await a.json()).toEqual({ after: "1xx" });
    const b = await postOwn(up.url, null, "{}", never());
    expect(b.status).toBe(204);
    expect(b.headers.get("x-n")).toBe("2");
    expect(await b.text()).toBe("");
    const c = await postOwn(up.url, null, "{}", never());
    expect(c.status).toBe(429);
    expect(c.headers.get("retry-after")).toBe("7");
    expect(await c.text()).toBe("");
    expect(up.connections()).toBe(1);
  });

  test("a gzip answer is decoded (servers may compress though we ask for identity)", async () => {
    const up = scripted((r, s) => {
      expect(r.head).toContain("accept-encoding: identity");
      const z = gzipSync('{"zipped":true}');
      s.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: ${z.length}\r\n\r\n`), z]));
    });
    expect(await (await postOwn(up.url, null, "{}", never())).json()).toEqual({ zipped: true });
  });

  test("a large request body goes whole (partial writes continue on drain); a large answer streams whole", async () => {
    const big = JSON.stringify({ input: "x".repeat(8 << 20) });
    const answer = "y".repeat(6 << 20);
    const up = scripted((r, s) => {
      const text = Buffer.from(ok(JSON.stringify({ got: r.body.length, sha: new Bun.CryptoHasher("sha256").update(r.body).digest("hex"), answer })));
      // Written as the socket drains: a server sends a large answer in many reads.
      let at = 0;
      const pump = () => {
        while (at < text.length) {
          const n = s.write(text.subarray(at, Math.min(at + 65536, text.length)));
          if (n <= 0) return setTimeout(pump, 1);
          at += n;
        }
      };
      pump();
    });
    const res = await postOwn(up.url, null, big, never());
    const got = (await res.json()) as { got: number; sha: string; answer: string };
    expect(got.got).toBe(Buffer.byteLength(big));
    expect(got.sha).toBe(new Bun.CryptoHasher("sha256").update(big).digest("hex"));
    expect(got.answer.length).toBe(answer.length);
  });
});

describe("failures", () => {
  // A kept connection the engine closes (the rule is at the top of
  // httpClient.ts): each case below has the engine close at a chosen point,
  // and waits for what the client has seen, never for a timer.
  test("a kept connection whose close the client has seen is not reused: the next request goes on a new connection", async () => {
    const up = scripted((r, s) => {
      s.write(ok(`{"conn":${r.conn}}`));
      // The first connection is closed by the upstream right after its answer (as an idle timeout would).
      if (r.conn === 1) s.end();
    });
    expect(await (await postOwn(up.url, null, '{"n":1}', never())).json()).toEqual({ conn: 1 });
    // The client has seen the close once the connection left its pool.
    await waitFor(() => up.closed() === 1 && idleConnections(up.url) === 0, "the client to drop the closed connection");
    expect(await (await postOwn(up.url, null, '{"n":2}', never())).json()).toEqual({ conn: 2 });
    expect(up.received.map((r) => [r.conn, r.body.toString()])).toEqual([
      [1, '{"n":1}'],
      [2, '{"n":2}'],
    ]);
  });

  test("a kept connection the engine closes as the next request arrives, unread: that request fails (UpstreamConnectionError), is not sent again, and the call after it gets a new connection", async () => {
    let conns = 0;
    const seen: string[] = [];
    const server = Bun.listen<{ id: number; served: number }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(s) {
          s.data = { id: ++conns, served: 0 };
        },
        data(s, d) {
          // The second request on the first connection: closed at its first bytes, not read.
          if (s.data.id === 1 && s.data.served === 1) return void s.terminate();
          seen.push(`${s.data.id}:${d.toString("latin1").split("\r\n\r\n")[1]}`);
          s.data.served++;
          s.write(ok(`{"conn":${s.data.id}}`));
        },
      },
    });
    servers.push(server as unknown as TCPSocketListener<ConnState>);
    const url = `http://127.0.0.1:${server.port}/v1/chat/completions`;
    expect(await (await postOwn(url, null, '{"n":1}', never())).json()).toEqual({ conn: 1 });
    expect(idleConnections(url)).toBe(1);
    const err = await postOwn(url, null, '{"n":2}', never()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamConnectionError);
    expect(conns).toBe(1); // no second connection was opened for it: not sent again
    expect(await (await postOwn(url, null, '{"n":3}', never())).json()).toEqual({ conn: 2 });
    expect(seen).toEqual(['1:{"n":1}', '2:{"n":3}']);
  });

  test("Keep-Alive: timeout=N from the engine: its connection is reused only within N-1 s (and never when N <= 1)", async () => {
    expect(reuseWithin("timeout=5, max=100")).toBe(2_000); // capped at the client's own limit
    expect(reuseWithin("timeout=2")).toBe(1_000);
    expect(reuseWithin('max=3, timeout="1"')).toBe(0);
    expect(reuseWithin("max=3")).toBe(2_000);
    const up = scripted((r, s) => {
      const hint = r.body.toString() === "short" ? "timeout=1" : "timeout=2";
      s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nkeep-alive: ${hint}\r\ncontent-length: ${`{"conn":${r.conn}}`.length}\r\n\r\n{"conn":${r.conn}}`);
    });
    expect(await (await postOwn(up.url, null, "a", never())).json()).toEqual({ conn: 1 });
    expect(await (await postOwn(up.url, null, "b", never())).json()).toEqual({ conn: 1 }); // within a second: reused
    await Bun.sleep(1_100); // past timeout=2 less a second (a wait that can only be longer, never shorter)
    expect(await (await postOwn(up.url, null, "short", never())).json()).toEqual({ conn: 2 });
    expect(idleConnections(up.url)).toBe(0); // timeout=1: not kept at all
    expect(await (await postOwn(up.url, null, "c", never())).json()).toEqual({ conn: 3 });
  });

  test("a request the upstream read on a kept connection and dropped unanswered is not sent again (docs/CONTRACT.md §17)", async () => {
    const up = scripted((r, s) => {
      // The first connection answers once, then reads the next request and drops it (a worker killed mid-request).
      if (r.conn === 1 && s.data.served === 2) return void s.terminate();
      s.write(ok(`{"conn":${r.conn}}`));
    });
    expect(await (await postOwn(up.url, null, '{"n":1}', never())).json()).toEqual({ conn: 1 });
    await expect(postOwn(up.url, null, '{"n":2}', never())).rejects.toBeInstanceOf(UpstreamConnectionError);
    expect(up.received.map((r) => [r.conn, r.body.toString()])).toEqual([
      [1, '{"n":1}'],
      [1, '{"n":2}'],
    ]);
  });

  test("a new connection closed unanswered is not retried: UpstreamConnectionError", async () => {
    const up = scripted((_r, s) => void s.terminate());
    await expect(postOwn(up.url, null, "{}", never())).rejects.toBeInstanceOf(UpstreamConnectionError);
    expect(up.received.length).toBe(1);
  });

  test("an answer cut short: reading its body fails; the next call gets a new connection", async () => {
    const up = scripted((r, s) => {
      if (r.conn === 1) {
        s.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":");
        setTimeout(() => s.terminate(), 5);
      } else s.write(ok("{}"));
    });
    const res = await postOwn(up.url, null, "{}", never());
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toBeDefined();
    expect(await (await postOwn(up.url, null, "{}", never())).text()).toBe("{}");
    expect(up.connections()).toBe(2);
  });

  test("abort before the answer rejects with the signal's reason; abort mid-body fails the body; neither connection is reused", async () => {
    const up = scripted((r, s) => {
      if (r.body.toString() === "slow") return; // never answered
      if (r.body.toString() === "half") return void s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n");
      s.write(ok("fine"));
    });
    const a = new AbortController();
    const pending = postOwn(up.url, null, "slow", a.signal);
    setTimeout(() => a.abort(new DOMException("timed out after 10 ms", "TimeoutError")), 10);
    const err = await pending.catch((e) => e);
    expect(err).toBeInstanceOf(DOMException);
    expect((err as DOMException).name).toBe("TimeoutError");

    const b = new AbortController();
    const res = await postOwn(up.url, null, "half", b.signal);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("abc");
    b.abort(new DOMException("client gone", "AbortError"));
    await expect(reader.read()).rejects.toBeDefined();

    expect(await (await postOwn(up.url, null, "ok", never())).text()).toBe("fine");
    expect(up.connections()).toBe(3);
    // An already aborted signal: nothing is sent.
    const before = up.received.length;
    await expect(postOwn(up.url, null, "{}", AbortSignal.abort())).rejects.toBeDefined();
    expect(up.received.length).toBe(before);
  });

  test("a reader that cancels mid-stream closes the connection (its rest is never read)", async () => {
    const up = scripted((r, s) => {
      if (r.conn === 1) s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n");
      else s.write(ok("next"));
    });
    const res = await postOwn(up.url, null, "{}", never());
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    // The upstream sees its connection closed: none is left open and unused.
    await waitFor(() => up.closed() === 1, "up.closed() === 1");
    expect(await (await postOwn(up.url, null, "{}", never())).text()).toBe("next");
    expect(up.connections()).toBe(2);
  });

  test("refused connections, garbage and oversized heads are UpstreamConnectionErrors", async () => {
    const gone = scripted(() => {});
    const url = gone.url;
    gone.server.stop(true);
    await expect(postOwn(url, null, "{}", never())).rejects.toBeInstanceOf(UpstreamConnectionError);

    const garbage = scripted((_r, s) => void s.write("SSH-2.0-OpenSSH\r\n\r\n"));
    await expect(postOwn(garbage.url, null, "{}", never())).rejects.toThrow(/HTTP\/1/);

    const huge = scripted((_r, s) => void s.write(`HTTP/1.1 200 OK\r\nx-big: ${"a".repeat(70_000)}\r\n`));
    await expect(postOwn(huge.url, null, "{}", never())).rejects.toThrow(/longer than/);

    const badChunk = scripted((_r, s) => void s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"));
    const res = await postOwn(badChunk.url, null, "{}", never());
    await expect(res.text()).rejects.toBeDefined();
  });
});

test("canUseOwnClient: plain http without a proxy in the environment; never https, credentials in the URL or a proxy", () => {
  expect(canUseOwnClient("http://127.0.0.1:8000/v1", {})).toBe(true);
  expect(canUseOwnClient("http://vllm.internal/v1", {})).toBe(true);
  expect(canUseOwnClient("https://api.openai.com/v1", {})).toBe(false);
  expect(canUseOwnClient("http://user:pw@host/v1", {})).toBe(false);
  expect(canUseOwnClient("http://127.0.0.1:8000/v1", { HTTP_PROXY: "http://proxy:3128" })).toBe(false);
  expect(canUseOwnClient("http://127.0.0.1:8000/v1", { http_proxy: "http://proxy:3128" })).toBe(false);
  expect(canUseOwnClient("not a url", {})).toBe(false);
});

describe("the setting picks the client", () => {
  for (const [setting, agent] of [
    ["builtin", /^offpeak$/],
    ["fetch", /^Bun\//],
  ] as const) {
    test(`OFFPEAK_UPSTREAM_CLIENT=${setting}: a chat completion and a batch line go through ${setting === "builtin" ? "offpeak's client" : "fetch"}, with the same answers`, async () => {
      const agents: string[] = [];
      // An upstream that says which client called it.
      const up = Bun.serve({
        hostname: "127.0.0.1",
        port: 0,
        async fetch(req) {
          if (req.method === "GET") return Response.json({ object: "list", data: [{ id: "which-model", object: "model", created: 0, owned_by: "t" }] });
          agents.push(req.headers.get("user-agent") ?? "");
          const body = (await req.json()) as { messages: { content: string }[] };
          return Response.json({
            id: "chatcmpl-x",
            object: "chat.completion",
            created: 0,
            model: "which-model",
            choices: [{ index: 0, message: { role: "assistant", content: body.messages[0]!.content }, finish_reason: "stop", logprobs: null }],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          });
        },
      });
      const srv = await startTestServer({ env: { OFFPEAK_UPSTREAM_CLIENT: setting, OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${up.port}/v1` } });
      try {
        const client = srv.sdk();
        const answer = await client.chat.completions.create({ model: "which-model", messages: [{ role: "user", content: "which client?" }] });
        expect(answer.choices[0]!.message.content).toBe("which client?");
        // One transport (src/inference/upstream/transport.ts): batch lines, run in Workers, go the same way.
        const { batch } = await createBatch(client, [chatReq("b-1", "batch line", { model: "which-model" })]);
        const done = await waitBatch(client, batch.id);
        expect(done.status).toBe("completed");
        const [line] = await readResults(client, done.output_file_id);
        expect(line!.response!.body.choices[0].message.content).toBe("batch line");
        expect(agents).toHaveLength(2);
        for (const a of agents) expect(a).toMatch(agent);
      } finally {
        await srv.stop();
        up.stop(true);
      }
    });
  }
});

test("upstream_client: builtin by default, fetch on request (environment or config file), anything else refused; https never uses it", () => {
  const dir = freshDataDir();
  try {
    expect(resolveConfig(["--data-dir", dir], {}).upstreamClient).toBe("builtin");
    expect(resolveConfig(["--data-dir", dir], { OFFPEAK_UPSTREAM_CLIENT: "fetch" }).upstreamClient).toBe("fetch");
    const file = join(dir, "config.json");
    writeFileSync(file, JSON.stringify({ server: { upstream_client: "fetch" } }));
    expect(resolveConfig(["--data-dir", dir, "--config", file], {}).upstreamClient).toBe("fetch");
    expect(() => resolveConfig(["--data-dir", dir], { OFFPEAK_UPSTREAM_CLIENT: "curl" })).toThrow(ConfigError);
    writeFileSync(file, JSON.stringify({ server: { upstream_client: "undici" } }));
    expect(() => resolveConfig(["--data-dir", dir, "--config", file], {})).toThrow();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * Answers llhttp (Node's HTTP parser, no lenient flags) refuses, each written
 * byte by byte. Named after the llhttp test fixtures they mirror
 * (test/response/*.md, test/request/*.md for the shared header rules).
 */
const MALFORMED: [string, string][] = [
  ["invalid.md: CR inside a header value", "HTTP/1.1 200 OK\r\ncontent-type: text/event\rstream\r\ncontent-length: 2\r\n\r\nok"],
  ["invalid.md: NUL inside a header value", "HTTP/1.1 200 OK\r\nx-a: b\0c\r\ncontent-length: 2\r\n\r\nok"],
  ["lenient-headers: a control character (0x01) in a header value", "HTTP/1.1 200 OK\r\nx-a: b\x01c\r\ncontent-length: 2\r\n\r\nok"],
  ["lf-only: bare LF line endings", "HTTP/1.1 200 OK\ncontent-length: 2\n\nok"],
  ["lf-only: one header line ending in a bare LF", "HTTP/1.1 200 OK\r\nx-a: b\ncontent-length: 2\r\n\r\nok"],
  ["invalid.md: a folded header line (obs-fold)", "HTTP/1.1 200 OK\r\nx-a: b\r\n c\r\ncontent-length: 2\r\n\r\nok"],
  ["invalid.md: whitespace before the colon", "HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\nok"],
  ["content-length.md: Content-Length with Transfer-Encoding", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
  ["transfer-encoding.md: a Transfer-Encoding other than chunked", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nok"],
  ["transfer-encoding.md: chunked not alone", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
  ["content-length.md: an overflowing Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\nok"],
  ["content-length.md: a duplicate Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok"],
  ["content-length.md: a Content-Length that is not digits", "HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok"],
  ["content-length.md: spaces inside Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 1 1\r\n\r\nok"],
  ["chunked: a chunk-size line ending in a bare LF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n"],
  ["invalid.md: a status code of four digits", "HTTP/1.1 2000 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["invalid.md: a control character in the reason phrase", "HTTP/1.1 200 O\x01K\r\ncontent-length: 2\r\n\r\nok"],
  ["invalid.md: not HTTP/1.x", "HTTP/2 200\r\ncontent-length: 2\r\n\r\nok"],
];

describe("malformed answers are refused as llhttp refuses them: no resend, no leaked connection", () => {
  for (const [name, answer] of MALFORMED) {
    test(name, async () => {
      const up = scripted(async (_r, s) => {
        for (let i = 0; i < answer.length; i++) {
          if (s.write(answer.slice(i, i + 1)) <= 0) return;
          await Bun.sleep(0);
        }
      });
      const failure = await postOwn(up.url, null, '{"n":1}', never()).then(
        (res) => res.text().then(() => null, (e) => e),
        (e) => e,
      );
      expect(failure).not.toBeNull();
      expect(up.received.length).toBe(1); // sent once, never again
      await waitFor(() => up.closed() === 1, "up.closed() === 1"); // the connection is closed, not kept
    });
  }

  test("a head that never completes fails at the head deadline, not the call's timeout", async () => {
    const up = scripted((_r, s) => void s.write("HTTP/1.1 200 OK\r\nx-a: b\r\n"));
    const t0 = Date.now();
    await expect(postOwn(up.url, null, "{}", never())).rejects.toThrow(/within 5000 ms/);
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(up.received.length).toBe(1);
  }, SCENARIO_MS);

  test("well-formed neighbours still pass: obs-text and tabs in values, chunk extensions, Content-Length 0", async () => {
    const up = scripted((r, s) => {
      const n = Number(r.body.toString());
      if (n === 1) s.write("HTTP/1.1 200 OK\r\nx-a: caf\xe9\tb\r\ncontent-length: 2\r\n\r\nok");
      else if (n === 2) s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n2;x=y\r\nok\r\n0\r\n\r\n");
      else s.write("HTTP/1.1 200\r\ncontent-length: 0\r\n\r\n");
    });
    expect(await (await postOwn(up.url, null, "1", never())).text()).toBe("ok");
    expect(await (await postOwn(up.url, null, "2", never())).text()).toBe("ok");
    expect(await (await postOwn(up.url, null, "3", never())).text()).toBe("");
  });
});

describe("a misbehaving engine never keeps a model's concurrency slot", () => {
  test("answers with a CR or NUL in a header (streamed or not) are 502s, and the model (max_concurrency 1) still answers after them", async () => {
    let bad = true;
    const up = scripted((r, s) => {
      if (r.head.startsWith("GET")) return void s.write(ok(JSON.stringify({ object: "list", data: [{ id: "jam-model", object: "model", created: 0, owned_by: "t" }] })));
      const streamed = r.body.toString().includes('"stream":true');
      if (bad) return void s.write(streamed ? "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\x00\r\ntransfer-encoding: chunked\r\n\r\n" : "HTTP/1.1 200 OK\r\ncontent-type: application/json\rx\r\ncontent-length: 2\r\n\r\n{}");
      const answer = JSON.stringify({ id: "chatcmpl-x", object: "chat.completion", created: 0, model: "jam-model", choices: [{ index: 0, message: { role: "assistant", content: "fine" }, finish_reason: "stop", logprobs: null }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      s.write(ok(answer));
    });
    const dir = freshDataDir();
    const config = join(dir, "offpeak.json");
    writeFileSync(config, JSON.stringify({ upstreams: [{ name: "jammer", base_url: up.url.replace("/chat/completions", ""), models: ["jam-model"], max_concurrency: 1, queue_size: 0 }] }));
    const srv = await startTestServer({ dataDir: dir, argv: ["--config", config] });
    try {
      const call = (stream: boolean) =>
        srv.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "jam-model", stream, messages: [{ role: "user", content: "hi" }] }) });
      for (const stream of [false, true, false, true]) {
        const res = await call(stream);
        expect(res.status).toBe(502);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("upstream_error");
      }
      bad = false;
      const res = await call(false);
      expect(res.status).toBe(200);
      expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe("fine");
      // Each bad answer was asked once: nothing was sent twice.
      expect(up.received.filter((r) => r.head.startsWith("POST")).length).toBe(5);
    } finally {
      await srv.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// The own HTTP/1.1 client's head parser (src/inference/upstream/httpClient.ts)
// reads the status line and headers straight from the bytes (one pass a
// line, no split, no regular expression per line) and decodes a body that
// came whole with its head straight from the packet. These are the edges that
// rewrite touched, each answer written whole (one read: the fast path) and
// byte by byte (the partial-head path): what llhttp refuses is refused (docs/CONTRACT.md
// §17), what it takes is read the same as before.
import { afterAll, describe, expect, test } from "bun:test";
import type { TCPSocketListener } from "bun";
import type { CallAbort } from "../src/inference/upstream/deadline";
import { postOwn, UpstreamConnectionError } from "../src/inference/upstream/httpClient";
import { waitFor } from "./helpers/wait";

const never: CallAbort = { aborted: false, reason: undefined, listen() {} };

type Mode = "whole" | "bytewise";
interface Up {
  url: string;
  requests: () => number;
  closed: () => number;
}
const servers: TCPSocketListener<{ buf: string }>[] = [];
afterAll(() => {
  for (const s of servers) s.stop(true);
});

/** A TCP server answering every request (a head and a Content-Length body) with `answer`'s bytes, whole or one byte at a time. */
function upstream(answer: string | Buffer, mode: Mode): Up {
  let requests = 0;
  let closed = 0;
  const bytes = typeof answer === "string" ? Buffer.from(answer, "latin1") : answer;
  const server = Bun.listen<{ buf: string }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        s.data = { buf: "" };
      },
      close() {
        closed++;
      },
      async data(s, d) {
        s.data.buf += d.toString("latin1");
        const end = s.data.buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/content-length: (\d+)/i.exec(s.data.buf.slice(0, end))?.[1] ?? 0);
        if (s.data.buf.length < end + 4 + len) return;
        s.data.buf = s.data.buf.slice(end + 4 + len);
        requests++;
        if (mode === "whole") return void s.write(bytes);
        for (let i = 0; i < bytes.length; i++) {
          if (s.write(bytes.subarray(i, i + 1)) <= 0) return;
          await Bun.sleep(0);
        }
      },
    },
  });
  servers.push(server);
  return { url: `http://127.0.0.1:${server.port}/v1/chat/completions`, requests: () => requests, closed: () => closed };
}


/** The call's failure (a refused head rejects the call; a refused body fails its text), or null if it was read whole. */
async function failureOf(url: string): Promise<unknown> {
  return postOwn(url, null, "{}", never).then(
    (res) => res.text().then(() => null, (e) => e),
    (e) => e,
  );
}

/** Answers llhttp refuses whose checks the byte-wise head parser makes itself. */
const REFUSED: [string, string][] = [
  ["DEL (0x7f) in a header value", "HTTP/1.1 200 OK\r\nx-a: b\x7fc\r\ncontent-length: 2\r\n\r\nok"],
  ["a vertical tab in a header value", "HTTP/1.1 200 OK\r\nx-a: b\x0bc\r\ncontent-length: 2\r\n\r\nok"],
  ["an escape (0x1b) in a header name", "HTTP/1.1 200 OK\r\nx\x1ba: b\r\ncontent-length: 2\r\n\r\nok"],
  ["a CR at the end of the last header, before the blank line", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: b\r\r\n\r\nok"],
  ["a CR at the end of a value, before its CRLF", "HTTP/1.1 200 OK\r\nx-a: b\r\r\ncontent-length: 2\r\n\r\nok"],
  ["a bare LF inside the status line", "HTTP/1.1 200 O\nK\r\ncontent-length: 2\r\n\r\nok"],
  ["DEL in the reason phrase", "HTTP/1.1 200 O\x7fK\r\ncontent-length: 2\r\n\r\nok"],
  ["a folded line with a tab (obs-fold)", "HTTP/1.1 200 OK\r\nx-a: b\r\n\tc\r\ncontent-length: 2\r\n\r\nok"],
  ["a tab before the colon", "HTTP/1.1 200 OK\r\ncontent-length\t: 2\r\n\r\nok"],
  ["a header line with no colon", "HTTP/1.1 200 OK\r\nx-a b\r\ncontent-length: 2\r\n\r\nok"],
  ["an empty header name", "HTTP/1.1 200 OK\r\n: b\r\ncontent-length: 2\r\n\r\nok"],
  ["a non-token byte (0xe9) in a header name", "HTTP/1.1 200 OK\r\ncaf\xe9: b\r\ncontent-length: 2\r\n\r\nok"],
  ["a duplicate Content-Length in another case", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCONTENT-LENGTH: 2\r\n\r\nok"],
  ["Content-Length with Transfer-Encoding, names in mixed case", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
  ["an empty Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\nok"],
  ["a Content-Length of 16 digits", "HTTP/1.1 200 OK\r\ncontent-length: 0000000000000002\r\n\r\nok"],
  ["a negative Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: -2\r\n\r\nok"],
  ["a hexadecimal Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 0x2\r\n\r\nok"],
  ["a Transfer-Encoding other than chunked, name in mixed case", "HTTP/1.1 200 OK\r\nTransfer-ENCODING: identity\r\n\r\nok"],
  ["two Transfer-Encoding headers", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
  ["HTTP/1.2", "HTTP/1.2 200 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["lower-case http/1.1", "http/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["no space after the version", "HTTP/1.1\t200 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["a status of two digits", "HTTP/1.1 20 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["a status with a letter", "HTTP/1.1 2x0 OK\r\ncontent-length: 2\r\n\r\nok"],
  ["a tab instead of the space before the reason", "HTTP/1.1 200\tOK\r\ncontent-length: 2\r\n\r\nok"],
  ["an empty status line", "\r\ncontent-length: 2\r\n\r\nok"],
  ["a Content-Encoding offpeak does not decode (br)", "HTTP/1.1 200 OK\r\nContent-Encoding: BR\r\ncontent-length: 2\r\n\r\nok"],
];

/** Answers llhttp takes, and what the client reads from them: status, a header or two, the body. */
const TAKEN: [string, string, { status: number; headers: Record<string, string | null>; text: string }][] = [
  [
    "header names in any case are read lower-cased; Content-Length and Content-Type in mixed case",
    'HTTP/1.1 200 OK\r\nCoNtEnT-TyPe: application/json\r\nX-Request-ID: abc\r\nCONTENT-LENGTH: 7\r\n\r\n{"a":1}',
    { status: 200, headers: { "content-type": "application/json", "x-request-id": "abc" }, text: '{"a":1}' },
  ],
  [
    "spaces and tabs around a value are not part of it; tabs and obs-text inside it are",
    "HTTP/1.1 200 OK\r\nx-a:\t \tcaf\xe9\tb \t\r\nx-empty:\r\nx-spaces:   \r\ncontent-length:\t 2 \t\r\n\r\nok",
    { status: 200, headers: { "x-a": "caf\xe9\tb", "x-empty": "", "x-spaces": "" }, text: "ok" },
  ],
  ["a status line with no reason", "HTTP/1.1 201\r\ncontent-length: 2\r\n\r\nok", { status: 201, headers: {}, text: "ok" }],
  ["a reason with tabs and obs-text", "HTTP/1.0 200 O\tK caf\xe9\r\ncontent-length: 2\r\n\r\nok", { status: 200, headers: {}, text: "ok" }],
  ["a reason that is only a space", "HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\nok", { status: 200, headers: {}, text: "ok" }],
  ["Transfer-Encoding CHUNKED in upper case, its name mixed", "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n2\r\nok\r\n0\r\n\r\n", { status: 200, headers: {}, text: "ok" }],
  ["a Content-Length of 15 digits with leading zeros", "HTTP/1.1 200 OK\r\ncontent-length: 000000000000002\r\n\r\nok", { status: 200, headers: {}, text: "ok" }],
  ["a colon inside a value", "HTTP/1.1 200 OK\r\nx-at: 12:30:00\r\ncontent-length: 2\r\n\r\nok", { status: 200, headers: { "x-at": "12:30:00" }, text: "ok" }],
  [
    "a UTF-8 body is decoded as UTF-8, a leading byte order mark dropped (as TextDecoder does)",
    `HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength('\ufeff{"é":"✓"}')}\r\n\r\n` + Buffer.from('\ufeff{"é":"✓"}').toString("latin1"),
    { status: 200, headers: {}, text: '{"é":"✓"}' },
  ],
  [
    "keep-alive and connection headers are not passed on; the others are",
    "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nx-b: 1\r\ncontent-length: 2\r\n\r\nok",
    { status: 200, headers: { "keep-alive": null, connection: null, "x-b": "1" }, text: "ok" },
  ],
];

for (const mode of ["whole", "bytewise"] as const) {
  describe(`head parsing (${mode})`, () => {
    for (const [name, answer] of REFUSED) {
      test(`refused: ${name}`, async () => {
        const up = upstream(answer, mode);
        const failure = await failureOf(up.url);
        expect(failure).toBeInstanceOf(UpstreamConnectionError);
        expect(up.requests()).toBe(1); // sent once, never again
        await waitFor(() => up.closed() === 1, "up.closed() === 1"); // the connection is closed, not kept
      });
    }
    for (const [name, answer, want] of TAKEN) {
      test(`taken: ${name}`, async () => {
        const up = upstream(answer, mode);
        const res = await postOwn(up.url, null, "{}", never);
        expect(res.status).toBe(want.status);
        for (const [k, v] of Object.entries(want.headers)) expect(res.headers.get(k)).toBe(v);
        expect(await res.text()).toBe(want.text);
      });
    }
  });
}

describe("Connection, whatever the case of its name and value", () => {
  for (const [line, reused] of [
    ["CONNECTION: Close", false],
    ["connection: CLOSE", false],
    ["Connection: keep-alive", true],
    ["CoNnEcTiOn:\tKeep-Alive", true],
  ] as const) {
    test(`${JSON.stringify(line)}: the connection is ${reused ? "reused" : "closed"}`, async () => {
      const up = upstream(`HTTP/1.1 200 OK\r\n${line}\r\ncontent-length: 2\r\n\r\nok`, "whole");
      for (let i = 0; i < 2; i++) expect(await (await postOwn(up.url, null, "{}", never)).text()).toBe("ok");
      await waitFor(() => up.closed() === (reused ? 0 : 2), "up.closed() === (reused ? 0 : 2)");
      expect(up.requests()).toBe(2);
    });
  }
  test("HTTP/1.0 is closed unless it says keep-alive (any case)", async () => {
    const closes = upstream("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", "whole");
    const keeps = upstream("HTTP/1.0 200 OK\r\nConnection: KEEP-ALIVE\r\ncontent-length: 2\r\n\r\nok", "whole");
    for (const up of [closes, keeps]) for (let i = 0; i < 2; i++) expect(await (await postOwn(up.url, null, "{}", never)).text()).toBe("ok");
    await waitFor(() => closes.closed() === 2, "closes.closed() === 2");
    expect(keeps.closed()).toBe(0);
  });
});

describe("a body that came whole with its head", () => {
  test("reads as text once, or as a stream (then text() reads what the stream did not)", async () => {
    const up = upstream('HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{"a":1}', "whole");
    const a = await postOwn(up.url, null, "{}", never);
    expect(await a.text()).toBe('{"a":1}');
    expect(await a.text()).toBe("");
    const b = await postOwn(up.url, null, "{}", never);
    const body = b.body!;
    expect(b.body).toBe(body); // the same stream each time
    expect(new TextDecoder().decode((await body.getReader().read()).value)).toBe('{"a":1}');
    const c = await postOwn(up.url, null, "{}", never);
    expect(await new Response(c.body).text()).toBe('{"a":1}');
    // One connection served all three: each answer was read to its end.
    expect(up.requests()).toBe(3);
    expect(up.closed()).toBe(0);
  });

  test("invalid UTF-8 in the body becomes U+FFFD, as TextDecoder makes it", async () => {
    const body = Buffer.from([0x7b, 0xff, 0xc3, 0x7d]);
    const up = upstream(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]), "whole");
    const res = await postOwn(up.url, null, "{}", never);
    expect(await res.text()).toBe(new TextDecoder().decode(body));
  });
});

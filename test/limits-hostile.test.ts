// docs/CONTRACT.md §16, bounded request resources: JSON bodies over max_json_bytes are
// refused with 413 without being held (a declared Content-Length before a
// byte of the body is read, a chunked body while it is counted), uploads
// beyond the server's and a key's concurrency get 429 with retry-after, and
// an upload that stops sending is ended with 408. Nothing is stored either
// way, and an upload's validator Workers go with it. Clients here are raw
// sockets: they send headers alone, stall, or trickle, as hostile ones do.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, resolveConfig } from "../src/config";
import { uploadSlotsOf } from "../src/files/uploadSlots";
import { validatorWorkers } from "../src/jsonl/validatorClient";
import { chatLine, startTestServer, storedBlobs, uploadRaw, type TestServer } from "./helpers/server";
import { waitFor } from "./helpers/wait";

const MAX_JSON = 4096;

const configDir = mkdtempSync(join(tmpdir(), "offpeak-limits-"));
function configFile(name: string, limits: Record<string, number>): string {
  const path = join(configDir, name);
  writeFileSync(path, JSON.stringify({ limits }));
  return path;
}

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** A client on a raw socket: it writes what it is told, when it is told, and collects the answer. */
class RawClient {
  readonly sock: Socket;
  readonly answer: Promise<RawAnswer>;
  /** Bytes written after the request's head. */
  sentBody = 0;
  /** Everything the server sent, as text. */
  received = "";
  private headDone = false;

  constructor(port: number, head: string) {
    this.sock = connect(port, "127.0.0.1");
    this.sock.write(head);
    let buf = Buffer.alloc(0);
    this.answer = new Promise((resolve, reject) => {
      const parse = (final: boolean) => {
        const end = buf.indexOf("\r\n\r\n");
        if (end === -1) return final ? reject(new Error(`no answer (${buf.length} bytes)`)) : undefined;
        const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
        const headers: Record<string, string> = {};
        for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(":")).toLowerCase()] = l.slice(l.indexOf(":") + 1).trim();
        const body = buf.subarray(end + 4);
        const length = headers["content-length"] === undefined ? null : Number(headers["content-length"]);
        if (final || (length !== null && body.length >= length))
          resolve({ status: Number(lines[0]!.split(" ")[1]), headers, body: body.subarray(0, length ?? body.length).toString() });
      };
      this.sock.on("data", (d: Buffer) => {
        this.received += d.toString("latin1");
        buf = Buffer.concat([buf, d]);
        parse(false);
      });
      this.sock.on("close", () => parse(true));
      this.sock.on("error", () => {}); // EPIPE/ECONNRESET once the server closed: the answer is what counts
    });
    this.answer.catch(() => {});
    this.headDone = true;
  }

  /** Writes body bytes (false once the socket is gone). */
  async send(data: string | Buffer): Promise<boolean> {
    if (this.sock.destroyed || !this.headDone) return false;
    this.sentBody += typeof data === "string" ? Buffer.byteLength(data) : data.length;
    if (!this.sock.write(data)) await new Promise((r) => this.sock.once("drain", r));
    return !this.sock.destroyed;
  }

  close(): void {
    this.sock.destroy();
  }
}

/** The answer, or a failure after `ms` (a server that waits for the body never answers a client that sends none). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms: ${what}`)), ms))]);
}

const until = (cond: () => boolean | Promise<boolean>, what: string, ms = 20_000) => waitFor(cond, what, ms);

const chunk = (data: string | Buffer) => {
  const b = typeof data === "string" ? Buffer.from(data) : data;
  return Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from("\r\n")]);
};

function jsonHead(t: TestServer, path: string, framing: string, key = t.admin): string {
  return `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n${framing}\r\n`;
}

/** `prefix` padded with trailing spaces (still the same JSON) to exactly `bytes`. */
function padded(json: object, bytes: number): string {
  const s = JSON.stringify(json);
  if (Buffer.byteLength(s) > bytes) throw new Error("body too long to pad");
  return s + " ".repeat(bytes - Buffer.byteLength(s));
}

/** `closes`: a declared length over the limit closes the connection (its body is never read); a chunked body's rest is read and dropped. */
function expectTooLarge(a: RawAnswer, what: string, closes: boolean) {
  expect({ what, status: a.status }).toEqual({ what, status: 413 });
  const err = JSON.parse(a.body).error;
  expect(err).toMatchObject({ code: "request_too_large", type: "invalid_request_error" });
  expect({ what, connection: a.headers["connection"] === "close" }).toEqual({ what, connection: closes });
}

describe("JSON bodies over max_json_bytes", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ argv: ["--config", configFile("json.json", { max_json_bytes: MAX_JSON })] });
  });
  afterAll(() => t.stop());

  // Every route that reads a JSON body: the direct dispatch (exact POSTs to
  // the inference routes) and Elysia's routes (parse: jsonOnly).
  const ROUTES = [
    "/v1/chat/completions",
    "/api/v1/chat/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/completions",
    "/api/v1/batches",
    "/api/v1/keys",
    "/api/v1/chats",
    "/api/v1/chats/chat_x/stream",
    "/api/v1/webhook_endpoints",
    "/v1/keys",
  ];

  test("a declared Content-Length over the limit is answered 413 from the headers alone, on every JSON route", async () => {
    // 1 MB is under the default limit (32 MiB): the server's own setting is the one applied.
    for (const declared of [MAX_JSON + 1, 1_000_000, 400_000_000]) {
      for (const path of ROUTES) {
        const c = new RawClient(t.server.port, jsonHead(t, path, `Content-Length: ${declared}\r\n`));
        const a = await within(c.answer, 5000, `${path} with Content-Length ${declared}`);
        expect(c.sentBody).toBe(0);
        expectTooLarge(a, `${path} ${declared}`, true);
        c.close();
      }
    }
  });

  test("a chunked body is counted while it is read: 413 once it passes the limit, long before its end", async () => {
    for (const path of ["/v1/chat/completions", "/api/v1/keys", "/api/v1/batches"]) {
      const c = new RawClient(t.server.port, jsonHead(t, path, "Transfer-Encoding: chunked\r\n"));
      let answered = false;
      c.answer.then(() => (answered = true), () => (answered = true));
      await c.send(chunk('{"model":"offpeak-echo","messages":['));
      // Up to 400 MB, 64 KB at a time, until the server answers.
      const piece = chunk(Buffer.alloc(65536, 0x20));
      while (!answered && c.sentBody < 400e6 && (await c.send(piece))) await Bun.sleep(1);
      const a = await within(c.answer, 5000, path);
      expectTooLarge(a, path, false);
      // Refused at the first chunk past the limit: the client had sent a few chunks (socket buffers), not hundreds of MB.
      expect(c.sentBody).toBeLessThan(16 << 20);
      // The rest of the body is read and dropped, not taken for a request: once it ends, the connection serves the next one.
      for (let i = 0; i < 16; i++) await c.send(piece);
      await c.send("0\r\n\r\n");
      await c.send(`GET /api/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${t.admin}\r\n\r\n`);
      await until(() => /HTTP\/1\.1 200[^]*"object":"list"/.test(c.received), `${path}: the next request on the connection`, 5000);
      expect(c.received.match(/HTTP\/1\.1 \d+/g)).toEqual(["HTTP/1.1 413", "HTTP/1.1 200"]);
      c.close();
    }
  });

  test("exactly max_json_bytes is read, sized or chunked; one byte more is 413", async () => {
    const chatBody = { model: "offpeak-echo", messages: [{ role: "user", content: "hi" }] };
    const exact = padded(chatBody, MAX_JSON);
    const over = exact + " ";
    // Sized (fetch sends Content-Length), on the direct dispatch and on an Elysia route.
    const chat = (body: string) => t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body });
    const key = (body: string) => t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body });
    const okChat = await chat(exact);
    expect(okChat.status).toBe(200);
    expect(((await okChat.json()) as { object: string }).object).toBe("chat.completion");
    const okKey = await key(padded({ name: "exact" }, MAX_JSON));
    expect(okKey.status).toBe(200);
    for (const res of [await chat(over), await key(padded({ name: "over" }, MAX_JSON + 1))]) {
      expect(res.status).toBe(413);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
    }
    // Chunked, split so that the limit falls inside a chunk and at a chunk's end.
    for (const [body, status] of [
      [exact, 200],
      [over, 413],
    ] as const) {
      for (const path of ["/v1/chat/completions", "/api/v1/chat/completions/"]) {
        const c = new RawClient(t.server.port, jsonHead(t, path, "Transfer-Encoding: chunked\r\n"));
        await c.send(chunk(body.slice(0, 1000)));
        await c.send(chunk(body.slice(1000)));
        await c.send("0\r\n\r\n");
        const a = await within(c.answer, 5000, `${path} chunked ${body.length}`);
        expect({ path, size: body.length, status: a.status }).toEqual({ path, size: body.length, status });
        c.close();
      }
    }
  });

  test("a request without a key is answered 401 from its headers, its body unread", async () => {
    const c = new RawClient(t.server.port, `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 400000000\r\n\r\n`);
    const a = await within(c.answer, 5000, "no key");
    expect(a.status).toBe(401);
    expect(c.sentBody).toBe(0);
    c.close();
  });
});

// A multipart upload that has sent its head, its purpose and `lines` of its
// file, then waits: what 60 stalled uploads did to the server.
const B = "----hostileboundary";
function stalledUpload(t: TestServer, key: string, lines = 20): RawClient {
  const c = new RawClient(
    t.server.port,
    `POST /api/v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: multipart/form-data; boundary=${B}\r\nContent-Length: 100000000\r\n\r\n`,
  );
  const file = Array.from({ length: lines }, (_, i) => chatLine(`r${i}`)).join("\n") + "\n";
  void c.send(
    `--${B}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
      `--${B}\r\nContent-Disposition: form-data; name="file"; filename="stall.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n${file}`,
  );
  return c;
}

const listed = async (t: TestServer) => ((await (await t.api("/files")).json()) as { data: unknown[] }).data;

describe("uploads at once", () => {
  let t: TestServer;
  let k1: string;
  let k2: string;
  beforeAll(async () => {
    t = await startTestServer({
      argv: ["--config", configFile("uploads.json", { max_concurrent_uploads: 3, max_concurrent_uploads_per_key: 2, upload_idle_timeout_s: 60 })],
    });
    k1 = await t.createKey({ name: "k1", scopes: ["files:read", "files:write"] });
    k2 = await t.createKey({ name: "k2", scopes: ["files:read", "files:write"] });
  });
  afterAll(() => t.stop());

  test("past the per-key and the per-server limit: 429 with retry-after, nothing stored; Workers bounded and released", async () => {
    const slots = uploadSlotsOf(t.server.ctx);
    const held: RawClient[] = [];
    const refused = async (key: string, why: RegExp) => {
      const c = stalledUpload(t, key);
      const a = await within(c.answer, 5000, "a refused upload");
      expect(a.status).toBe(429);
      expect(Number(a.headers["retry-after"])).toBeGreaterThanOrEqual(1);
      const err = JSON.parse(a.body).error;
      expect(err).toMatchObject({ code: "rate_limit_exceeded", type: "rate_limit_error" });
      expect(err.message).toMatch(why);
      c.close();
    };
    try {
      held.push(stalledUpload(t, k1), stalledUpload(t, k1));
      await until(() => slots.active === 2 && validatorWorkers().busy === 4, "two uploads of k1 under way");
      // k1 has its 2; the server has room for a third, but not for k1.
      await refused(k1, /key/);
      held.push(stalledUpload(t, k2));
      await until(() => slots.active === 3, "three uploads under way");
      // k2 has one of its 2, but the server has its 3.
      await refused(k2, /server/);
      await refused(t.admin, /server/);
      // Workers: two per upload under way, none for the refused ones (3 × 2, the bound).
      expect(validatorWorkers().busy).toBe(6);
      // A temp file each on the local disk; in a bucket (OFFPEAK_TEST_STORAGE=s3) an upload's first part waits in memory.
      if (!t.storage) expect((await storedBlobs(t)).filter((n) => n.startsWith("tmp/")).length).toBe(3);
    } finally {
      for (const c of held) c.close();
    }
    // The clients went away: their slots, Workers and temp files with them.
    await until(() => slots.active === 0, "slots given back");
    await until(() => validatorWorkers().busy === 0, "validator Workers released");
    await until(async () => (await storedBlobs(t)).length === 0, "temp files removed");
    expect(await listed(t)).toEqual([]);
    // And uploads work again.
    const ok = await uploadRaw(t, chatLine("a") + "\n", "batch", "ok.jsonl", k1);
    expect(ok.status).toBe(200);
  });
});

describe("an upload that stops sending", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ argv: ["--config", configFile("idle.json", { upload_idle_timeout_s: 1 })] });
  });
  afterAll(() => t.stop());

  test("is ended with 408 after upload_idle_timeout_s: its temp file removed, its Workers released, nothing listed", async () => {
    const slots = uploadSlotsOf(t.server.ctx);
    const c = stalledUpload(t, t.admin);
    await until(() => validatorWorkers().busy === 2 && slots.active === 1, "the upload under way");
    // A temp file on the local disk; in a bucket (OFFPEAK_TEST_STORAGE=s3) an upload's first part waits in memory.
    if (!t.storage) expect((await storedBlobs(t)).filter((n) => n.startsWith("tmp/")).length).toBe(1);
    const started = Date.now();
    const a = await within(c.answer, 10_000, "the idle upload");
    expect(a.status).toBe(408);
    expect(JSON.parse(a.body).error).toMatchObject({ code: "request_timeout", type: "invalid_request_error" });
    expect(Date.now() - started).toBeLessThan(5000);
    c.close();
    expect(slots.active).toBe(0);
    await until(() => validatorWorkers().busy === 0, "validator Workers released");
    await until(async () => (await storedBlobs(t)).length === 0, "temp file removed");
    expect(await listed(t)).toEqual([]);
  });

  test("a slow client that keeps sending is not idle, and a stall before the file costs no Worker", async () => {
    const c = new RawClient(
      t.server.port,
      `POST /api/v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${t.admin}\r\nContent-Type: multipart/form-data; boundary=${B}\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    await c.send(chunk(`--${B}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`));
    await c.send(chunk(`--${B}\r\nContent-Disposition: form-data; name="file"; filename="slow.jsonl"\r\n\r\n`));
    await Bun.sleep(400);
    expect(validatorWorkers().busy).toBe(0);
    // 2.5 s in all, never 1 s without a byte.
    for (let i = 0; i < 5; i++) {
      await c.send(chunk(chatLine(`s${i}`) + "\n"));
      await Bun.sleep(500);
    }
    await c.send(chunk(`\r\n--${B}--\r\n`));
    await c.send("0\r\n\r\n");
    const a = await within(c.answer, 5000, "the slow upload");
    expect({ status: a.status, body: a.body }).toMatchObject({ status: 200 });
    expect(JSON.parse(a.body)).toMatchObject({ object: "file", filename: "slow.jsonl", purpose: "batch" });
    c.close();
  });
});

describe("settings", () => {
  const resolve = (argv: string[], env: Record<string, string> = {}) => resolveConfig(["--data-dir", configDir, ...argv], env);

  test("defaults: 32 MiB of JSON, 16 uploads at once, 4 per key, 60 s idle", () => {
    expect(resolve([])).toMatchObject({ maxJsonBytes: 32 << 20, maxConcurrentUploads: 16, maxConcurrentUploadsPerKey: 4, uploadIdleTimeoutS: 60 });
  });

  test("flag > env > config file", () => {
    const file = configFile("all.json", { max_json_bytes: 5000, max_concurrent_uploads: 5, max_concurrent_uploads_per_key: 3, upload_idle_timeout_s: 7 });
    expect(resolve(["--config", file])).toMatchObject({ maxJsonBytes: 5000, maxConcurrentUploads: 5, maxConcurrentUploadsPerKey: 3, uploadIdleTimeoutS: 7 });
    const env = { OFFPEAK_MAX_JSON_BYTES: "6000", OFFPEAK_MAX_CONCURRENT_UPLOADS: "6", OFFPEAK_MAX_CONCURRENT_UPLOADS_PER_KEY: "2", OFFPEAK_UPLOAD_IDLE_TIMEOUT_S: "8" };
    expect(resolve(["--config", file], env)).toMatchObject({ maxJsonBytes: 6000, maxConcurrentUploads: 6, maxConcurrentUploadsPerKey: 2, uploadIdleTimeoutS: 8 });
    const flags = ["--max-json-bytes", "7000", "--max-concurrent-uploads", "9", "--max-concurrent-uploads-per-key", "1", "--upload-idle-timeout-s", "30"];
    expect(resolve(["--config", file, ...flags], env)).toMatchObject({ maxJsonBytes: 7000, maxConcurrentUploads: 9, maxConcurrentUploadsPerKey: 1, uploadIdleTimeoutS: 30 });
  });

  test("bad values stop the start", () => {
    for (const [argv, env] of [
      [["--max-json-bytes", "32"], {}],
      [[], { OFFPEAK_MAX_JSON_BYTES: "32MiB" }],
      [[], { OFFPEAK_MAX_CONCURRENT_UPLOADS: "0" }],
      [["--max-concurrent-uploads-per-key", "-1"], {}],
      [[], { OFFPEAK_UPLOAD_IDLE_TIMEOUT_S: "0" }],
      [["--upload-idle-timeout-s", "1.5"], {}],
    ] as [string[], Record<string, string>][])
      expect(() => resolve(argv, env)).toThrow(ConfigError);
    expect(() => resolve(["--config", configFile("bad.json", { upload_idle_timeout_s: 0 })])).toThrow(ConfigError);
  });
});

afterAll(() => rmSync(configDir, { recursive: true, force: true }));

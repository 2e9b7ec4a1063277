// docs/CONTRACT.md §10 for files and keys: bad input gets a clear 4xx with the OpenAI
// error body, and changes nothing — no file record, no bytes in files/, no
// leftovers in tmp/.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { ADMIN_KEY, chatLine, startTestServer, storedBlobs, uploadRaw, type TestServer } from "./helpers/server";

/** Response.json() typed loosely, for assertions. */
const json = (res: Response): Promise<any> => res.json();

let t: TestServer;
/** Started with small limits: --max-file-bytes 1000 --max-batch-lines 3. */
let small: TestServer;

beforeAll(async () => {
  [t, small] = await Promise.all([startTestServer(), startTestServer({ argv: ["--max-file-bytes", "1000", "--max-batch-lines", "3"] })]);
});
afterAll(async () => {
  await Promise.all([t?.stop(), small?.stop()]);
});

const enc = new TextEncoder();
const lines = (...ls: string[]) => ls.join("\n") + "\n";

/** Asserts the exact OpenAI error body and JSON content type; returns the error object. */
async function expectError(res: Response, status: number, expected: { code?: string; param?: string | null; type?: string; message?: RegExp | string } = {}) {
  const text = await res.text();
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${text}`);
  expect(res.headers.get("content-type")).toMatch(/^application\/json\b/);
  expect(res.headers.get("x-request-id")).toMatch(/^req_[0-9A-Za-z]{24}$/);
  const body = JSON.parse(text);
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  const e = body.error;
  expect(typeof e.message).toBe("string");
  expect(e.message.length).toBeGreaterThan(0);
  expect(typeof e.type).toBe("string");
  expect(e.param === null || typeof e.param === "string").toBe(true);
  expect(e.code === null || typeof e.code === "string").toBe(true);
  const defaultType = status === 404 ? "not_found_error" : status === 401 ? "authentication_error" : status === 403 ? "permission_error" : "invalid_request_error";
  expect(e.type).toBe(expected.type ?? defaultType);
  if (expected.code !== undefined) expect(e.code).toBe(expected.code);
  if (expected.param !== undefined) expect(e.param).toBe(expected.param);
  if (typeof expected.message === "string") expect(e.message).toContain(expected.message);
  else if (expected.message) expect(e.message).toMatch(expected.message);
  return e as { message: string; type: string; param: string | null; code: string | null };
}

interface Snapshot {
  ids: string[];
  files: string[];
  tmp: string[];
}

async function snapshot(s: TestServer): Promise<Snapshot> {
  const res = await s.api("/files?order=asc");
  expect(res.status).toBe(200);
  const ids = ((await json(res)) as { data: { id: string }[] }).data.map((f) => f.id);
  const stored = await storedBlobs(s);
  return { ids, files: stored.filter((n) => !n.startsWith("tmp/")), tmp: stored.filter((n) => n.startsWith("tmp/")) };
}

/** Runs a request that must be rejected, and asserts it stored nothing. */
async function rejected(s: TestServer, send: () => Promise<Response>, status: number, expected: Parameters<typeof expectError>[2] = {}) {
  const before = await snapshot(s);
  expect(before.tmp).toEqual([]);
  const res = await send();
  const err = await expectError(res, status, expected);
  const after = await snapshot(s);
  expect(after).toEqual(before);
  return err;
}

/** Uploads and expects 200; returns the file record. */
async function accepted(s: TestServer, content: string | Uint8Array, purpose = "batch"): Promise<any> {
  const res = await uploadRaw(s, content, purpose);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`expected 200, got ${res.status}: ${text}`);
  const f = JSON.parse(text);
  expect(f.status).toBe("processed");
  expect(f.bytes).toBe(typeof content === "string" ? enc.encode(content).length : content.length);
  // Stored byte-for-byte.
  const back = new Uint8Array(await (await s.api(`/files/${f.id}/content`)).arrayBuffer());
  expect(back).toEqual(typeof content === "string" ? enc.encode(content) : new Uint8Array(content));
  expect(readdirSync(join(s.dataDir, "tmp"))).toEqual([]);
  return f;
}

function rawMultipart(s: TestServer, parts: string[], boundary = "XyZbOuNdArY", close = true): Promise<Response> {
  const body = parts.map((p) => `--${boundary}\r\n${p}\r\n`).join("") + (close ? `--${boundary}--\r\n` : "");
  return s.api("/files", { method: "POST", headers: { "content-type": `multipart/form-data; boundary=${boundary}` }, body });
}

/** A raw HTTP/1.1 GET or DELETE, so that the path reaches the server exactly as written (fetch would normalise it). */
function rawRequest(s: TestServer, method: string, path: string): Promise<Response> {
  return new Promise((resolve, reject) => {
    const sock = connect(s.server.port, "127.0.0.1", () => {
      sock.write(`${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nConnection: close\r\n\r\n`);
    });
    const chunks: Buffer[] = [];
    sock.on("data", (d: Buffer) => chunks.push(d));
    sock.on("error", reject);
    sock.on("end", () => {
      const all = Buffer.concat(chunks);
      const headEnd = all.indexOf("\r\n\r\n");
      const head = all.subarray(0, headEnd).toString("latin1").split("\r\n");
      const status = Number(head[0]!.split(" ")[1]);
      const headers = new Headers();
      for (const h of head.slice(1)) {
        const i = h.indexOf(":");
        headers.append(h.slice(0, i).trim(), h.slice(i + 1).trim());
      }
      let body = all.subarray(headEnd + 4);
      if (headers.get("transfer-encoding")?.includes("chunked")) {
        const out: Buffer[] = [];
        let p = 0;
        for (;;) {
          const eol = body.indexOf("\r\n", p);
          const n = parseInt(body.subarray(p, eol).toString("latin1"), 16);
          if (!n) break;
          out.push(body.subarray(eol + 2, eol + 2 + n));
          p = eol + 2 + n + 2;
        }
        body = Buffer.concat(out);
      }
      resolve(new Response(status === 204 || status === 304 ? null : body, { status, headers }));
    });
  });
}

describe("POST /files: transport-level problems", () => {
  test("wrong content type → 400 naming content-type", async () => {
    for (const [ct, body] of [
      ["application/json", JSON.stringify({ purpose: "batch", file: chatLine("a") })],
      ["text/plain", chatLine("a")],
      ["application/x-www-form-urlencoded", "purpose=batch&file=x"],
      ["multipart/form-data", "no boundary"],
      ["multipart/mixed; boundary=abc", "--abc--\r\n"],
    ] as const) {
      await rejected(t, () => t.api("/files", { method: "POST", headers: { "content-type": ct }, body }), 400, { param: "content-type" });
    }
    await rejected(t, () => t.api("/files", { method: "POST" }), 400);
  });

  test("multipart with purpose but no file → 400 missing_field file", async () => {
    const form = new FormData();
    form.append("purpose", "batch");
    await rejected(t, () => t.api("/files", { method: "POST", body: form }), 400, { code: "missing_field", param: "file" });
    // A plain field named "file" (no filename) is not a file.
    const form2 = new FormData();
    form2.append("purpose", "batch");
    form2.append("file", chatLine("a"));
    await rejected(t, () => t.api("/files", { method: "POST", body: form2 }), 400, { code: "missing_field", param: "file" });
  });

  test("a file part with an empty filename → 400 on file", async () => {
    await rejected(
      t,
      () => rawMultipart(t, ['Content-Disposition: form-data; name="purpose"\r\n\r\nbatch', `Content-Disposition: form-data; name="file"; filename=""\r\n\r\n${chatLine("a")}`]),
      400,
      { param: "file" },
    );
  });

  test("multipart with a file but no purpose → 400 missing_field purpose", async () => {
    const form = new FormData();
    form.append("file", new Blob([lines(chatLine("a"))]), "in.jsonl");
    await rejected(t, () => t.api("/files", { method: "POST", body: form }), 400, { code: "missing_field", param: "purpose" });
  });

  test("unknown purpose → 400 naming purpose", async () => {
    for (const purpose of ["nope", "batch_output", "Batch", ""]) {
      const err = await rejected(t, () => uploadRaw(t, lines(chatLine("a")), purpose), 400, { param: "purpose" });
      if (purpose !== "") expect(err.code).toBe("invalid_value");
    }
  });

  test("two file parts in one request → 400", async () => {
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([lines(chatLine("a"))]), "a.jsonl");
    form.append("file", new Blob([lines(chatLine("b"))]), "b.jsonl");
    await rejected(t, () => t.api("/files", { method: "POST", body: form }), 400, { param: "file" });
  });

  test("truncated multipart (no closing boundary) → 400", async () => {
    await rejected(
      t,
      () => rawMultipart(t, ['Content-Disposition: form-data; name="purpose"\r\n\r\nbatch', `Content-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n${chatLine("a")}`], "XyZ", false),
      400,
    );
  });

  test("empty file → 400 invalid_file", async () => {
    await rejected(t, () => uploadRaw(t, ""), 400, { code: "invalid_file", param: "file" });
    await rejected(t, () => uploadRaw(t, "", "user_data"), 400, { code: "invalid_file", param: "file" });
  });
});

describe("HTTP methods a route does not have", () => {
  test("PUT/PATCH on files and keys routes → 4xx JSON error, nothing stored", async () => {
    const f = await accepted(t, lines(chatLine("m")));
    for (const [method, path] of [
      ["PUT", "/files"],
      ["PATCH", "/files"],
      ["DELETE", "/files"],
      ["PUT", `/files/${f.id}`],
      ["POST", `/files/${f.id}`],
      ["POST", `/files/${f.id}/content`],
      ["PUT", "/keys"],
      ["DELETE", "/keys"],
    ] as const) {
      const res = await rejectedAny(() => t.api(path, { method, headers: { "content-type": "application/json" }, body: "{}" }));
      expect({ method, path, status: [404, 405].includes(res.status) }).toEqual({ method, path, status: true });
    }
    expect((await t.api(`/files/${f.id}`)).status).toBe(200);
  });
});

/** Like rejected(), for answers whose exact 4xx status the contract leaves open. */
async function rejectedAny(send: () => Promise<Response>) {
  const before = await snapshot(t);
  const res = await send();
  await expectError(res.clone() as Response, res.status, { type: res.status === 404 ? "not_found_error" : "invalid_request_error" });
  expect(await snapshot(t)).toEqual(before);
  return res;
}

describe("POST /files purpose=batch: line checks", () => {
  const good = (id: string) => chatLine(id);

  test("a file of only blank lines has no requests → 400", async () => {
    const err = await rejected(t, () => uploadRaw(t, "\n\n   \n"), 400, { code: "invalid_file" });
    expect(err.message).toContain("no requests");
  });

  test("non-JSON line → 400 naming the 1-based line", async () => {
    const err = await rejected(t, () => uploadRaw(t, lines(good("a"), good("b"), "{not json", good("c"))), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 3\b/);
  });

  test("non-JSON line → the message gives the byte column and the reason (docs/CONTRACT.md §19)", async () => {
    // A missing comma after "method": the byte where the next key starts (after a multi-byte "é").
    const bad = '{"custom_id": "é", "method": "POST" "url": "/v1/chat/completions", "body": {"model": "offpeak-echo"}}';
    const err = await rejected(t, () => uploadRaw(t, lines(good("a"), good("b"), bad)), 400, { code: "invalid_file" });
    expect(err.message).toBe(`Invalid batch file: line 3, column ${Buffer.byteLength(bad.slice(0, bad.indexOf('"url"'))) + 1}: not valid JSON: expected ',' or '}' after an object member, found '"'`);
    expect(err.param).toBe("file");
  });

  test("non-object lines (array, string, number, null) → 400 naming the line", async () => {
    for (const bad of ["[1,2]", '"str"', "42", "null", "true"]) {
      const err = await rejected(t, () => uploadRaw(t, lines(good("a"), bad)), 400, { code: "invalid_file" });
      expect(err.message).toMatch(/\bline 2\b/);
    }
  });

  test("missing custom_id → 400 missing_field custom_id", async () => {
    const line = JSON.stringify({ method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", messages: [] } });
    const err = await rejected(t, () => uploadRaw(t, lines(good("a"), good("b"), good("c"), line)), 400, { code: "missing_field", param: "custom_id" });
    expect(err.message).toMatch(/\bline 4\b/);
  });

  test("empty or non-string custom_id → 400 on custom_id", async () => {
    for (const id of ["", 7, { a: 1 }]) {
      const line = JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo" } });
      const err = await rejected(t, () => uploadRaw(t, lines(line)), 400, { param: "custom_id" });
      expect(err.message).toMatch(/\bline 1\b/);
    }
  });

  test("duplicate custom_id → 400 duplicate_custom_id naming the line of the second occurrence", async () => {
    // Blank lines count in the numbering: the duplicate is on physical line 5.
    const err = await rejected(t, () => uploadRaw(t, lines(good("a"), good("b"), "", good("c"), good("b"), good("d"))), 400, {
      code: "duplicate_custom_id",
      param: "custom_id",
    });
    expect(err.message).toMatch(/\bline 5\b/);
    expect(err.message).toContain("'b'");
  });

  test("duplicate custom_id far into a larger file", async () => {
    const ls = Array.from({ length: 5000 }, (_, i) => good(`id-${i}`));
    ls.push(good("id-1234"));
    const err = await rejected(t, () => uploadRaw(t, lines(...ls)), 400, { code: "duplicate_custom_id" });
    expect(err.message).toMatch(/\bline 5001\b/);
  });

  test("duplicates across the validator's 1 MB blocks, and between the fast and the exact path", async () => {
    // ≈3 MB: the repeat of id-7 comes blocks after its first use. Line 2 spells
    // "dup-x" with an escape (the exact JSON.parse path); line 30001 plainly.
    const pad = "p".repeat(60);
    const ls = Array.from({ length: 30_000 }, (_, i) => chatLine(`id-${i}`, pad));
    ls[1] = String.raw`{"custom_id":"dup-\u0078","method":"POST","url":"/v1/chat/completions","body":{"model":"offpeak-echo"}}`;
    expect(JSON.parse(ls[1]).custom_id).toBe("dup-x");
    const err = await rejected(t, () => uploadRaw(t, lines(...ls, good("dup-x"))), 400, { code: "duplicate_custom_id" });
    expect(err.message).toMatch(/\bline 30001\b/);
    expect(err.message).toContain("'dup-x'");
    ls.push(good("id-7"));
    const err2 = await rejected(t, () => uploadRaw(t, lines(...ls)), 400, { code: "duplicate_custom_id" });
    expect(err2.message).toMatch(/\bline 30001\b/);
    expect(err2.message).toContain("'id-7'");
  });

  test("many repeated ids: the first real duplicate is named (checking stops after 64 suspects)", async () => {
    const ls = Array.from({ length: 200 }, (_, i) => good(`id-${i}`));
    for (let i = 0; i < 100; i++) ls.push(good(`id-${i}`));
    ls.push("not json"); // after the 64th suspect: never reached
    const err = await rejected(t, () => uploadRaw(t, lines(...ls)), 400, { code: "duplicate_custom_id" });
    expect(err.message).toMatch(/\bline 201\b/);
    expect(err.message).toContain("'id-0'");
  });

  test("the first bad line wins", async () => {
    const err = await rejected(t, () => uploadRaw(t, lines(good("a"), good("a"), "nope")), 400, { code: "duplicate_custom_id" });
    expect(err.message).toMatch(/\bline 2\b/);
    const err2 = await rejected(t, () => uploadRaw(t, lines(good("a"), "nope", good("a"))), 400, { code: "invalid_file" });
    expect(err2.message).toMatch(/\bline 2\b/);
  });

  test("wrong method → 400 naming method", async () => {
    for (const method of ["GET", "post", undefined]) {
      const line = JSON.stringify({ custom_id: "a", method, url: "/v1/chat/completions", body: { model: "offpeak-echo" } });
      const err = await rejected(t, () => uploadRaw(t, lines(good("x"), line)), 400, { param: "method" });
      expect(err.message).toMatch(/\bline 2\b/);
    }
  });

  test("unsupported url → 400 naming url", async () => {
    for (const url of ["/v1/audio/speech", "/v1/images/generations", "/v1/responses/", "https://api.openai.com/v1/chat/completions", "/v1/chat/completions/", 5]) {
      const line = JSON.stringify({ custom_id: "a", method: "POST", url, body: { model: "offpeak-echo" } });
      const err = await rejected(t, () => uploadRaw(t, lines(line)), 400, { param: "url" });
      expect(err.message).toMatch(/\bline 1\b/);
    }
  });

  test("body without model, or not an object → 400", async () => {
    const noModel = JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/chat/completions", body: { messages: [] } });
    let err = await rejected(t, () => uploadRaw(t, lines(good("x"), good("y"), noModel)), 400, { param: "body.model" });
    expect(err.message).toMatch(/\bline 3\b/);
    const numModel = JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/embeddings", body: { model: 3, input: "x" } });
    await rejected(t, () => uploadRaw(t, lines(numModel)), 400, { param: "body.model" });
    for (const body of [null, "text", [1], undefined]) {
      const line = JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/chat/completions", body });
      err = await rejected(t, () => uploadRaw(t, lines(line)), 400, { param: "body" });
      expect(err.message).toMatch(/\bline 1\b/);
    }
  });

  test("invalid UTF-8 → 400 naming the line", async () => {
    const bytes = enc.encode(lines(good("a"), "X", good("c")));
    const bad = new Uint8Array(bytes.length + 2);
    const at = bytes.indexOf("X".charCodeAt(0));
    bad.set(bytes.subarray(0, at), 0);
    bad.set([0xc3, 0x28, 0xff], at); // invalid sequences in place of "X" (+2 bytes)
    bad.set(bytes.subarray(at + 1), at + 3);
    const err = await rejected(t, () => uploadRaw(t, bad), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 2\b/);
    expect(err.message).toContain("UTF-8");
  });

  test("invalid UTF-8 inside a string value is also rejected", async () => {
    const prefix = enc.encode(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"offpeak-echo","x":"`);
    const suffix = enc.encode(`"}}\n`);
    const bad = new Uint8Array([...prefix, 0xed, 0xa0, 0x80, ...suffix]); // an encoded surrogate
    const err = await rejected(t, () => uploadRaw(t, bad), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 1\b/);
  });

  test("a 10 MB single line → 400", async () => {
    const big = JSON.stringify({ custom_id: "big", method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", pad: "x".repeat(10 * 1024 * 1024) } });
    const err = await rejected(t, () => uploadRaw(t, lines(big)), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 1\b/);
    // Same when the long line is not the first one, and without a final newline.
    const err2 = await rejected(t, () => uploadRaw(t, good("a") + "\n" + big), 400, { code: "invalid_file" });
    expect(err2.message).toMatch(/\bline 2\b/);
  });

  test("purpose sent after the file still gets the batch checks", async () => {
    const form = new FormData();
    form.append("file", new Blob([lines(good("a"), "oops")]), "late.jsonl");
    form.append("purpose", "batch");
    const err = await rejected(t, () => t.api("/files", { method: "POST", body: form }), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 2\b/);

    // …and the same bytes with a non-batch purpose after the file are accepted.
    const form2 = new FormData();
    form2.append("file", new Blob([lines(good("a"), "oops")]), "late.jsonl");
    form2.append("purpose", "user_data");
    const res = await t.api("/files", { method: "POST", body: form2 });
    expect(res.status).toBe(200);
    expect((await json(res)).purpose).toBe("user_data");
  });

  test("CRLF line endings are accepted", async () => {
    const text = [good("a"), good("b"), good("c")].join("\r\n") + "\r\n";
    const f = await accepted(t, text);
    expect(f.purpose).toBe("batch");
    // CRLF does not hide a duplicate or change line numbers.
    const err = await rejected(t, () => uploadRaw(t, [good("a"), good("b"), good("a")].join("\r\n")), 400, { code: "duplicate_custom_id" });
    expect(err.message).toMatch(/\bline 3\b/);
  });

  test("a UTF-8 BOM is accepted", async () => {
    const f = await accepted(t, "\uFEFF" + lines(good("a"), good("b")));
    expect(f.bytes).toBe(3 + enc.encode(lines(good("a"), good("b"))).length);
  });

  test("blank lines and a missing final newline are fine; /api/v1 and embeddings urls are accepted", async () => {
    const emb = JSON.stringify({ custom_id: "e", method: "POST", url: "/v1/embeddings", body: { model: "offpeak-embed", input: "hi" } });
    const apiForm = JSON.stringify({ custom_id: "f", method: "POST", url: "/api/v1/chat/completions", body: { model: "offpeak-echo", messages: [] } });
    await accepted(t, "\n" + good("a") + "\n\n  \n" + emb + "\n" + apiForm);
  });

  test("non-ASCII UTF-8 content is accepted", async () => {
    await accepted(t, lines(chatLine("ü-1", "héllo wörld — 日本語 🙂"), chatLine("ü-2", "ok")));
  });
});

describe("unknown fields are ignored", () => {
  test("extra multipart fields, extra line fields and extra body fields", async () => {
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("foo", "bar");
    form.append("metadata[x]", "y");
    const line = JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/chat/completions", extra: { deep: [1, 2] }, body: { model: "offpeak-echo", whatever: true } });
    form.append("file", new Blob([lines(line)]), "extra.jsonl");
    const res = await t.api("/files", { method: "POST", body: form });
    expect(res.status).toBe(200);
    const f = await json(res);
    expect(f.purpose).toBe("batch");
    expect(f).not.toHaveProperty("foo");
  });

  test("unknown query parameters on GET /files", async () => {
    const res = await t.api("/files?foo=bar&limit=1&x[y]=z");
    expect(res.status).toBe(200);
    expect((await json(res)).object).toBe("list");
  });

  test("unknown fields on POST /keys", async () => {
    const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "extra", foo: 1, bar: { baz: [] } }) });
    expect(res.status).toBe(200);
    const k = await json(res);
    expect(k.name).toBe("extra");
    expect(k).not.toHaveProperty("foo");
    await t.api(`/keys/${k.id}`, { method: "DELETE" });
  });
});

describe("limits", () => {
  test("upload over max_file_bytes → 413 file_too_large, nothing stored", async () => {
    // Exactly at the limit is fine.
    const atLimit = new Uint8Array(1000).fill(0x61);
    const f = await accepted(small, atLimit, "user_data");
    expect(f.bytes).toBe(1000);
    await small.api(`/files/${f.id}`, { method: "DELETE" });

    await rejected(small, () => uploadRaw(small, new Uint8Array(1001).fill(0x61), "user_data"), 413, { code: "file_too_large", param: "file", type: "invalid_request_error" });
    // A batch file over the limit (valid lines) too.
    const batch = lines(...Array.from({ length: 3 }, (_, i) => chatLine(`big-${i}`, "x".repeat(400))));
    expect(enc.encode(batch).length).toBeGreaterThan(1000);
    await rejected(small, () => uploadRaw(small, batch), 413, { code: "file_too_large" });
    // Far over the limit (rejected from Content-Length before reading the body).
    await rejected(small, () => uploadRaw(small, new Uint8Array(200_000).fill(0x62), "user_data"), 413, { code: "file_too_large" });
  });

  test("more lines than --max-batch-lines → 400; exactly the limit is fine", async () => {
    await accepted(small, lines(chatLine("a"), chatLine("b"), chatLine("c")));
    // Blank lines are not requests.
    await accepted(small, lines(chatLine("a"), "", chatLine("b"), "", chatLine("c")));
    const err = await rejected(small, () => uploadRaw(small, lines(chatLine("a"), chatLine("b"), chatLine("c"), chatLine("d"))), 400, { code: "invalid_file" });
    expect(err.message).toMatch(/\bline 4\b/);
    expect(err.message).toContain("3");
  });
});

describe("query parameters on GET /files", () => {
  test("limit=0, -1, abc, 1.5, 10001 → 400 with param limit", async () => {
    for (const limit of ["0", "-1", "abc", "1.5", "10001", "1e3", "%20"]) {
      const err = await expectError(await t.api(`/files?limit=${limit}`), 400, { code: "invalid_value", param: "limit" });
      expect(err.message).toContain("limit");
    }
    expect((await t.api("/files?limit=1")).status).toBe(200);
    expect((await t.api("/files?limit=10000")).status).toBe(200);
  });

  test("order other than asc|desc → 400 with param order", async () => {
    for (const order of ["up", "ASC", "1"]) await expectError(await t.api(`/files?order=${order}`), 400, { param: "order" });
  });

  test("after that is not a file id of this project → 400 with param after", async () => {
    for (const after of ["nope", "file-000000000000000000000000", "x".repeat(5000)]) await expectError(await t.api(`/files?after=${after}`), 400, { param: "after" });
  });
});

describe("path ids", () => {
  let keep: string;
  beforeAll(async () => {
    keep = (await accepted(t, lines(chatLine("keep")))).id;
  });

  const expectNotFound = async (res: Response) => {
    await expectError(res, 404, { code: "not_found", type: "not_found_error" });
  };

  test("ids with .., %2F, %00 → 404 JSON, for every /files/:id route", async () => {
    const before = await snapshot(t);
    const ids = [
      "..",
      "..%2F..%2Foffpeak.db",
      "%2E%2E%2Foffpeak.db",
      "..%2Ffiles%2F" + keep,
      keep + "%2F..",
      "a%2Fb",
      "%2F",
      "%00",
      "file-%00",
      keep.slice(0, -1) + "%00",
      keep + "%00",
      "file-..",
      "%252E%252E",
    ];
    for (const id of ids) {
      await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/${id}`));
      await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/${id}/content`));
      await expectNotFound(await rawRequest(t, "DELETE", `/api/v1/files/${id}`));
      await expectNotFound(await rawRequest(t, "DELETE", `/v1/files/${id}`));
      await expectNotFound(await rawRequest(t, "DELETE", `/api/v1/keys/${id}`));
    }
    // Literal dot segments deeper in the path.
    await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/../../offpeak.db`));
    await expectNotFound(await rawRequest(t, "DELETE", `/api/v1/files/../../../etc/passwd`));
    expect(await snapshot(t)).toEqual(before);
    // The SQLite database the ids aimed at is still there (on Postgres there is none in the data dir).
    if (t.server.ctx.config.database.kind === "sqlite") expect(existsSync(join(t.dataDir, "offpeak.db"))).toBe(true);
    expect((await t.api(`/files/${keep}`)).status).toBe(200);
  });

  test("10 kB of junk as an id → 404 JSON with a bounded message", async () => {
    const junk = Array.from({ length: 10 * 1024 }, (_, i) => "abcXYZ019-_.~"[i % 13]).join("");
    for (const path of [`/files/${junk}`, `/files/${junk}/content`, `/files/file-${junk}`]) {
      const err = await expectError(await t.api(path), 404, { code: "not_found" });
      expect(err.message.length).toBeLessThan(500);
    }
    const err = await expectError(await t.api(`/files/${junk}`, { method: "DELETE" }), 404, { code: "not_found" });
    expect(err.message.length).toBeLessThan(500);
    await expectError(await t.api(`/keys/${junk}`, { method: "DELETE" }), 404, { code: "not_found" });
    // Percent-encoded junk bytes too.
    const encoded = Array.from({ length: 3000 }, (_, i) => "%" + (i % 256).toString(16).padStart(2, "0").toUpperCase()).join("");
    await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/${encoded}`));
  });

  test("ids that are not valid percent-encoding (%FF, %E2%82, lone %) → 404, not 500", async () => {
    for (const id of ["%FF", "abc%E2%82", "%", "%zz", "file-%C0%AF"]) {
      await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/${id}`));
      await expectNotFound(await rawRequest(t, "GET", `/api/v1/files/${id}/content`));
      await expectNotFound(await rawRequest(t, "DELETE", `/api/v1/files/${id}`));
      await expectNotFound(await rawRequest(t, "DELETE", `/api/v1/keys/${id}`));
    }
  });

  test("unknown but well-formed ids → 404", async () => {
    await expectNotFound(await t.api("/files/file-000000000000000000000000"));
    await expectNotFound(await t.api("/files/file-000000000000000000000000/content"));
    await expectNotFound(await t.api("/files/file-000000000000000000000000", { method: "DELETE" }));
    await expectNotFound(await t.api("/keys/key_000000000000000000000000", { method: "DELETE" }));
  });
});

describe("POST /keys bad input", () => {
  async function keyCount() {
    const res = await t.api("/keys");
    expect(res.status).toBe(200);
    return ((await json(res)) as { data: unknown[] }).data.length;
  }
  const post = (body: string, contentType = "application/json") => t.api("/keys", { method: "POST", headers: { "content-type": contentType }, body });

  test("malformed JSON → 400 (never 422), nothing created", async () => {
    const n = await keyCount();
    for (const body of ["{bad", '{"name": "x"', "", "{'name': 'x'}", "nul"]) {
      const res = await post(body);
      expect(res.status).not.toBe(422);
      await expectError(res, 400, { type: "invalid_request_error" });
    }
    expect(await keyCount()).toBe(n);
  });

  test("well-formed JSON with bad fields → 400 naming the field, nothing created", async () => {
    const n = await keyCount();
    const cases: [unknown, string | null][] = [
      [{}, "name"],
      [{ name: 5 }, "name"],
      [{ name: "" }, "name"],
      [{ name: "   " }, "name"],
      [{ name: "x".repeat(300) }, "name"],
      [{ name: "x", scopes: "admin" }, "scopes"],
      [{ name: "x", scopes: [] }, "scopes"],
      [{ name: "x", scopes: ["files:read", "root"] }, "scopes"],
      [{ name: "x", project: "has space" }, "project"],
      [{ name: "x", project: "" }, "project"],
      [{ name: "x", project: "p".repeat(65) }, "project"],
      [{ name: "x", rate_limits: { rpm: 0 } }, "rate_limits.rpm"],
      [{ name: "x", rate_limits: { tpm: -3 } }, "rate_limits.tpm"],
      [{ name: "x", rate_limits: { tpm: 1.5 } }, "rate_limits.tpm"],
      // A numeric string is not a number: nothing is coerced.
      [{ name: "x", rate_limits: { rpm: "5" } }, "rate_limits.rpm"],
      [{ name: "x", rate_limits: "fast" }, "rate_limits"],
      [{ name: "x", rate_limits: [60] }, "rate_limits"],
    ];
    for (const [body, param] of cases) {
      const res = await post(JSON.stringify(body));
      expect(res.status).not.toBe(422);
      await expectError(res, 400, { param });
    }
    for (const body of [[], null, "str", 42, { name: "x", rate_limits: { rpm: 0 } }, { name: "x", rate_limits: { rpm: "fast" } }, { name: "x", rate_limits: { tpm: 1.5 } }]) {
      const res = await post(JSON.stringify(body));
      expect(res.status).not.toBe(422);
      await expectError(res, 400);
    }
    expect(await keyCount()).toBe(n);
  });

  test("a body that is not JSON by its content type → 400 naming the content type, nothing created", async () => {
    const n = await keyCount();
    await expectError(await post("{bad", "text/plain"), 400);
    // A well-formed JSON body under the wrong type, a form, a multipart form.
    await expectError(await post(JSON.stringify({ name: "x" }), "text/plain"), 400, { message: /Content-Type: application\/json/ });
    await expectError(await post("name=x", "application/x-www-form-urlencoded"), 400, { message: /Content-Type: application\/json/ });
    const form = new FormData();
    form.append("name", "viaMultipart");
    await expectError(await t.api("/keys", { method: "POST", body: form }), 400, { message: /Content-Type: application\/json/ });
    expect(await keyCount()).toBe(n);
  });

  test("null for an optional field means not given", async () => {
    const res = await post(JSON.stringify({ name: "nulls", project: null, scopes: null, rate_limits: { rpm: null, tpm: null } }));
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ project: "default", rate_limits: { rpm: null, tpm: null } });
  });
});

// Files API (docs/CONTRACT.md §1, §4, §8 healthz/docs): the official `openai` SDK end to
// end, then the details the SDK does not reach (cursors, ranges, expiry,
// the /v1 mount, request ids) with plain fetch.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createReadStream, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import OpenAI, { toFile } from "openai";
import { ADMIN_KEY, chatLine, startTestServer, uploadRaw, type TestServer } from "./helpers/server";

/** Response.json() typed loosely, for assertions. */
const json = (res: Response): Promise<any> => res.json();

let t: TestServer;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestServer();
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
});

const FILE_ID = /^file-[0-9A-Za-z]{24}$/;
const REQUEST_ID = /^req_[0-9A-Za-z]{24}$/;
const FILE_KEYS = ["bytes", "created_at", "expires_at", "filename", "id", "object", "purpose", "status", "status_details"];

function batchText(n: number, prefix = "r"): string {
  return Array.from({ length: n }, (_, i) => chatLine(`${prefix}-${i}`)).join("\n") + "\n";
}

async function uploadOk(text: string | Uint8Array, purpose = "batch", filename = "input.jsonl"): Promise<any> {
  const res = await uploadRaw(t, text, purpose, filename);
  const body = await json(res);
  if (res.status !== 200) throw new Error(`upload failed: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

async function listJson(query: string, key: string = ADMIN_KEY): Promise<any> {
  const res = await t.api(`/files${query}`, { key });
  expect(res.status).toBe(200);
  return json(res);
}

/** Content-Length is the body's size, whichever storage holds the file (docs/CONTRACT.md §17; src/storage/sized.ts). */
function expectLength(res: Response, n: string | number) {
  expect(res.headers.get("content-length")).toBe(String(n));
}

function expectErrorShape(body: any) {
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(typeof body.error.message).toBe("string");
  expect(typeof body.error.type).toBe("string");
}

describe("official openai SDK", () => {
  test("upload from a web ReadableStream via toFile, retrieve, download, delete", async () => {
    const text = batchText(3, "sdk");
    const bytes = new TextEncoder().encode(text);
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        // Several chunks, split mid-line, to exercise the streaming path.
        c.enqueue(bytes.subarray(0, 50));
        c.enqueue(bytes.subarray(50, 170));
        c.enqueue(bytes.subarray(170));
        c.close();
      },
    });
    const created = await client.files.create({ file: await toFile(stream, "x.jsonl"), purpose: "batch" });
    expect(Object.keys(created).sort()).toEqual(FILE_KEYS);
    expect(created.id).toMatch(FILE_ID);
    expect(created.object).toBe("file");
    expect(created.bytes).toBe(bytes.length);
    expect(created.filename).toBe("x.jsonl");
    expect(created.purpose).toBe("batch");
    expect(created.status).toBe("processed");
    expect(created.expires_at).toBeNull();
    expect(created.status_details).toBeNull();
    expect(Number.isInteger(created.created_at)).toBe(true);
    expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(120);

    const got = await client.files.retrieve(created.id);
    expect(got).toEqual(created);

    const content = await client.files.content(created.id);
    expect(await content.text()).toBe(text);

    const deleted = await client.files.delete(created.id);
    expect(deleted).toEqual({ id: created.id, object: "file", deleted: true });

    // (APIPromise is lazy: bun's expect().rejects does not see it reject, so catch it here.)
    for (const call of [() => client.files.retrieve(created.id), () => client.files.content(created.id), () => client.files.delete(created.id)]) {
      const err = await call().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      expect((err as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404);
    }
    // The bytes are gone from storage too.
    expect(await Bun.file(join(t.dataDir, "files", created.id)).exists()).toBe(false);
  });

  test("upload from a Node Readable and from fs.createReadStream", async () => {
    const text1 = batchText(2, "node");
    const f1 = await client.files.create({ file: await toFile(Readable.from([Buffer.from(text1)]), "node.jsonl"), purpose: "batch" });
    expect(f1.bytes).toBe(Buffer.byteLength(text1));
    expect(await (await client.files.content(f1.id)).text()).toBe(text1);

    const path = join(t.dataDir, "..", `offpeak-files-test-${process.pid}.jsonl`);
    const text2 = batchText(5, "fs");
    writeFileSync(path, text2);
    const f2 = await client.files.create({ file: createReadStream(path), purpose: "batch" });
    expect(f2.filename).toBe(`offpeak-files-test-${process.pid}.jsonl`);
    expect(f2.bytes).toBe(Buffer.byteLength(text2));
    expect(await (await client.files.content(f2.id)).text()).toBe(text2);
    await Bun.file(path).delete();
    await client.files.delete(f1.id);
    await client.files.delete(f2.id);
  });

  test("list auto-paginates with limit=2 over more than 2 files (newest first)", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await client.files.create({ file: await toFile(Buffer.from(batchText(1, `p${i}`)), `p${i}.jsonl`), purpose: "batch" })).id);
    const seen: string[] = [];
    for await (const f of client.files.list({ limit: 2 })) {
      expect(f.object).toBe("file");
      seen.push(f.id);
    }
    expect(seen).toEqual([...ids].reverse());

    const firstPage = await client.files.list({ limit: 2 });
    expect(firstPage.data.map((f) => f.id)).toEqual([ids[4], ids[3]]);
    expect(firstPage.has_more).toBe(true);

    const ascending: string[] = [];
    for await (const f of client.files.list({ limit: 2, order: "asc" })) ascending.push(f.id);
    expect(ascending).toEqual(ids);
    for (const id of ids) await client.files.delete(id);
    expect((await client.files.list()).data).toEqual([]);
  });

  test("expires_after through the SDK sets expires_at = created_at + seconds", async () => {
    const f = await client.files.create({
      file: await toFile(Buffer.from("hello"), "notes.txt"),
      purpose: "user_data",
      expires_after: { anchor: "created_at", seconds: 7200 },
    });
    expect(f.expires_at).toBe(f.created_at + 7200);
    expect((await client.files.retrieve(f.id)).expires_at).toBe(f.created_at + 7200);
    await client.files.delete(f.id);
  });
});

describe("listing with fetch", () => {
  const ids: string[] = [];
  let userData: string;

  beforeAll(async () => {
    for (let i = 0; i < 4; i++) ids.push((await uploadOk(batchText(1, `l${i}`))).id);
    userData = (await uploadOk("plain bytes", "user_data", "u.txt")).id;
  });
  afterAll(async () => {
    for (const id of [...ids, userData]) await t.api(`/files/${id}`, { method: "DELETE" });
  });

  test("default: desc by creation, all files, has_more false", async () => {
    const body = await listJson("");
    expect(Object.keys(body).sort()).toEqual(["data", "first_id", "has_more", "last_id", "object"]);
    expect(body.object).toBe("list");
    expect(body.data.map((f: any) => f.id)).toEqual([userData, ...[...ids].reverse()]);
    expect(body.first_id).toBe(userData);
    expect(body.last_id).toBe(ids[0]);
    expect(body.has_more).toBe(false);
  });

  test("order=asc and order=desc", async () => {
    expect((await listJson("?order=asc")).data.map((f: any) => f.id)).toEqual([...ids, userData]);
    expect((await listJson("?order=desc")).data.map((f: any) => f.id)).toEqual([userData, ...[...ids].reverse()]);
  });

  test("limit, has_more, first_id/last_id and the after cursor walk every file once", async () => {
    const p1 = await listJson("?limit=2&order=asc");
    expect(p1.data.map((f: any) => f.id)).toEqual([ids[0], ids[1]]);
    expect(p1.first_id).toBe(ids[0]);
    expect(p1.last_id).toBe(ids[1]);
    expect(p1.has_more).toBe(true);

    const p2 = await listJson(`?limit=2&order=asc&after=${p1.last_id}`);
    expect(p2.data.map((f: any) => f.id)).toEqual([ids[2], ids[3]]);
    expect(p2.has_more).toBe(true);

    const p3 = await listJson(`?limit=2&order=asc&after=${p2.last_id}`);
    expect(p3.data.map((f: any) => f.id)).toEqual([userData]);
    expect(p3.first_id).toBe(userData);
    expect(p3.last_id).toBe(userData);
    expect(p3.has_more).toBe(false);

    const p4 = await listJson(`?limit=2&order=asc&after=${userData}`);
    expect(p4).toEqual({ object: "list", data: [], first_id: null, last_id: null, has_more: false });

    // Exactly `limit` left: has_more must be false.
    const exact = await listJson(`?limit=2&order=desc&after=${ids[2]}`);
    expect(exact.data.map((f: any) => f.id)).toEqual([ids[1], ids[0]]);
    expect(exact.has_more).toBe(false);

    const desc = await listJson(`?limit=3&after=${userData}`);
    expect(desc.data.map((f: any) => f.id)).toEqual([ids[3], ids[2], ids[1]]);
    expect(desc.has_more).toBe(true);
  });

  test("purpose filter", async () => {
    const batch = await listJson("?purpose=batch&order=asc");
    expect(batch.data.map((f: any) => f.id)).toEqual(ids);
    expect(batch.data.every((f: any) => f.purpose === "batch")).toBe(true);
    const ud = await listJson("?purpose=user_data");
    expect(ud.data.map((f: any) => f.id)).toEqual([userData]);
    expect(await listJson("?purpose=evals")).toEqual({ object: "list", data: [], first_id: null, last_id: null, has_more: false });
    const paged = await listJson("?purpose=batch&limit=1");
    expect(paged.data.map((f: any) => f.id)).toEqual([ids[3]]);
    expect(paged.has_more).toBe(true);
  });
});

describe("download", () => {
  const text = "0123456789abcdefghijklmnopqrstuvwxyz";
  let id: string;
  beforeAll(async () => {
    id = (await uploadOk(text, "user_data", "alpha.txt")).id;
  });

  test("full download has Content-Length and the exact bytes", async () => {
    const res = await t.api(`/files/${id}/content`);
    expect(res.status).toBe(200);
    expectLength(res, String(text.length));
    expect(res.headers.get("accept-ranges")).toBe("bytes");
    expect(await res.text()).toBe(text);
  });

  test("Range bytes=a-b → 206 with Content-Range", async () => {
    const res = await t.api(`/files/${id}/content`, { headers: { range: "bytes=2-5" } });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 2-5/${text.length}`);
    expectLength(res, "4");
    expect(await res.text()).toBe("2345");
  });

  test("open-ended range bytes=a-", async () => {
    const res = await t.api(`/files/${id}/content`, { headers: { range: "bytes=30-" } });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 30-35/${text.length}`);
    expect(await res.text()).toBe("uvwxyz");
  });

  test("a range end past the file is clamped", async () => {
    const res = await t.api(`/files/${id}/content`, { headers: { range: "bytes=34-1000" } });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 34-35/${text.length}`);
    expect(await res.text()).toBe("yz");
  });

  test("suffix range bytes=-n", async () => {
    const res = await t.api(`/files/${id}/content`, { headers: { range: "bytes=-4" } });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 32-35/${text.length}`);
    expectLength(res, "4");
    expect(await res.text()).toBe("wxyz");
  });

  test("unsatisfiable range → 416 with Content-Range bytes */size and a JSON error", async () => {
    for (const range of [`bytes=${text.length}-`, "bytes=1000-2000", "bytes=-0"]) {
      const res = await t.api(`/files/${id}/content`, { headers: { range } });
      expect(res.status).toBe(416);
      expect(res.headers.get("content-range")).toBe(`bytes */${text.length}`);
      expect(res.headers.get("content-type")).toStartWith("application/json");
      expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
      const body = await json(res);
      expectErrorShape(body);
      expect(body.error.type).toBe("invalid_request_error");
    }
  });

  test("a larger binary file downloads byte-identical with Content-Length", async () => {
    const bytes = new Uint8Array(300_000);
    crypto.getRandomValues(bytes.subarray(0, 65536));
    for (let i = 65536; i < bytes.length; i++) bytes[i] = (i * 31) & 0xff;
    const f = await uploadOk(bytes, "vision", "blob.bin");
    expect(f.bytes).toBe(bytes.length);
    const res = await t.api(`/files/${f.id}/content`);
    expect(res.status).toBe(200);
    expectLength(res, String(bytes.length));
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(bytes);
    const part = await t.api(`/files/${f.id}/content`, { headers: { range: "bytes=100000-100009" } });
    expect(part.status).toBe(206);
    expect(new Uint8Array(await part.arrayBuffer())).toEqual(bytes.slice(100000, 100010));
  });
});

describe("expiry", () => {
  function uploadWithExpiry(fields: Record<string, string>): Promise<Response> {
    const form = new FormData();
    form.append("purpose", "user_data");
    for (const [k, v] of Object.entries(fields)) form.append(k, v);
    form.append("file", new Blob(["data"]), "e.txt");
    return t.api("/files", { method: "POST", body: form });
  }

  test("expires_after[anchor]=created_at + seconds sets expires_at, also at the bounds", async () => {
    for (const seconds of [3600, 86400, 2592000]) {
      const res = await uploadWithExpiry({ "expires_after[anchor]": "created_at", "expires_after[seconds]": String(seconds) });
      expect(res.status).toBe(200);
      const f = await json(res);
      expect(f.expires_at).toBe(f.created_at + seconds);
      const again = await json(await t.api(`/files/${f.id}`));
      expect(again.expires_at).toBe(f.created_at + seconds);
      const listed = (await listJson("?purpose=user_data")).data.find((x: any) => x.id === f.id);
      expect(listed.expires_at).toBe(f.created_at + seconds);
      await t.api(`/files/${f.id}`, { method: "DELETE" });
    }
  });

  test("out-of-range or malformed expires_after → 400, nothing stored", async () => {
    const before = (await listJson("")).data.length;
    const cases: Record<string, string>[] = [
      { "expires_after[anchor]": "created_at", "expires_after[seconds]": "3599" },
      { "expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001" },
      { "expires_after[anchor]": "created_at", "expires_after[seconds]": "0" },
      { "expires_after[anchor]": "created_at", "expires_after[seconds]": "-3600" },
      { "expires_after[anchor]": "created_at", "expires_after[seconds]": "abc" },
      { "expires_after[anchor]": "created_at" },
      { "expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600" },
      { "expires_after[seconds]": "3600" },
    ];
    for (const fields of cases) {
      const res = await uploadWithExpiry(fields);
      expect(res.status).toBe(400);
      const body = await json(res);
      expectErrorShape(body);
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.param).toStartWith("expires_after");
    }
    expect((await listJson("")).data.length).toBe(before);
  });
});

describe("non-batch purposes", () => {
  test("accept arbitrary bytes (not JSONL, invalid UTF-8, NULs) and return them unchanged", async () => {
    const bytes = new Uint8Array(4096);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + 3) & 0xff;
    bytes.set([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x0a, 0x0d], 10);
    for (const purpose of ["fine-tune", "assistants", "vision", "user_data", "evals"]) {
      const f = await uploadOk(bytes, purpose, `${purpose}.bin`);
      expect(f.purpose).toBe(purpose);
      expect(f.status).toBe("processed");
      expect(f.bytes).toBe(bytes.length);
      const res = await t.api(`/files/${f.id}/content`);
      expect(new Uint8Array(await res.arrayBuffer())).toEqual(bytes);
      await t.api(`/files/${f.id}`, { method: "DELETE" });
    }
  });

  test("a text that would be an invalid batch file is fine as user_data", async () => {
    const f = await uploadOk("not json\n{}\n", "user_data", "x.jsonl");
    expect(f.purpose).toBe("user_data");
    await t.api(`/files/${f.id}`, { method: "DELETE" });
  });
});

describe("the /v1 mount", () => {
  test("every files route answers under /v1 exactly like under /api/v1", async () => {
    const auth = { authorization: `Bearer ${ADMIN_KEY}` };
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([batchText(2, "v1")]), "v1.jsonl");
    const up = await fetch(`${t.url}/v1/files`, { method: "POST", body: form, headers: auth });
    expect(up.status).toBe(200);
    const f = await json(up);
    expect(f.id).toMatch(FILE_ID);

    const viaApi = await json(await t.api(`/files/${f.id}`));
    expect(viaApi).toEqual(f);

    const got = await fetch(`${t.url}/v1/files/${f.id}`, { headers: auth });
    expect(got.status).toBe(200);
    expect(await json(got)).toEqual(f);

    const list = await fetch(`${t.url}/v1/files?purpose=batch`, { headers: auth });
    expect(list.status).toBe(200);
    expect((await json(list)).data.map((x: any) => x.id)).toContain(f.id);

    const content = await fetch(`${t.url}/v1/files/${f.id}/content`, { headers: { ...auth, range: "bytes=0-0" } });
    expect(content.status).toBe(206);
    expect(await content.text()).toBe("{");

    const del = await fetch(`${t.url}/v1/files/${f.id}`, { method: "DELETE", headers: auth });
    expect(del.status).toBe(200);
    expect(await json(del)).toEqual({ id: f.id, object: "file", deleted: true });
    expect((await t.api(`/files/${f.id}`)).status).toBe(404);
  });

  test("keys routes answer under /v1", async () => {
    const auth = { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" };
    const created = await fetch(`${t.url}/v1/keys`, { method: "POST", headers: auth, body: JSON.stringify({ name: "v1-key" }) });
    expect(created.status).toBe(200);
    const k = await json(created);
    const list = await fetch(`${t.url}/v1/keys`, { headers: auth });
    expect(list.status).toBe(200);
    expect((await json(list)).data.map((x: any) => x.id)).toContain(k.id);
    const del = await fetch(`${t.url}/v1/keys/${k.id}`, { method: "DELETE", headers: auth });
    expect(del.status).toBe(200);
    expect(await json(del)).toEqual({ id: k.id, object: "api_key", deleted: true });
  });

  test("the SDK works with a base URL ending in /v1", async () => {
    const v1 = new OpenAI({ apiKey: ADMIN_KEY, baseURL: `${t.url}/v1`, maxRetries: 0 });
    const f = await v1.files.create({ file: await toFile(Buffer.from(batchText(1, "sdkv1")), "a.jsonl"), purpose: "batch" });
    expect((await v1.files.retrieve(f.id)).id).toBe(f.id);
    await v1.files.delete(f.id);
  });
});

describe("healthz, docs, request ids", () => {
  test("GET /healthz → 200 ok without a key", async () => {
    const res = await fetch(`${t.url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("ok");
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
  });

  test("/docs answers 200", async () => {
    const res = await fetch(`${t.url}/docs`);
    expect(res.status).toBe(200);
    expect((await res.text()).length).toBeGreaterThan(0);
  });

  test("x-request-id on every response: success, errors, auth failures, unknown routes", async () => {
    const f = await uploadOk(batchText(1, "rid"));
    const responses: [string, Response][] = [
      ["list", await t.api("/files")],
      ["retrieve", await t.api(`/files/${f.id}`)],
      ["content", await t.api(`/files/${f.id}/content`)],
      ["upload", await uploadRaw(t, batchText(1, "rid2"))],
      ["bad upload", await uploadRaw(t, "nope")],
      ["400 limit", await t.api("/files?limit=0")],
      ["404 file", await t.api("/files/file-000000000000000000000000")],
      ["401", await t.api("/files", { key: null })],
      ["403", await t.api("/keys", { key: await t.createKey({ name: "ro", scopes: ["files:read"] }) })],
      ["404 api route", await t.api("/nope")],
      ["404 outside api", await fetch(`${t.url}/definitely/not/here`)],
      ["404 /v1 route", await fetch(`${t.url}/v1/nope`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })],
      ["keys list", await t.api("/keys")],
      ["delete", await t.api(`/files/${f.id}`, { method: "DELETE" })],
    ];
    const ids = new Set<string>();
    for (const [label, res] of responses) {
      const rid = res.headers.get("x-request-id");
      expect({ label, ok: REQUEST_ID.test(rid ?? "") }).toEqual({ label, ok: true });
      ids.add(rid!);
      await res.arrayBuffer();
    }
    expect(ids.size).toBe(responses.length);
  });

  test("unknown routes answer a 404 JSON error (to a valid key: outside the public list, no key is a 401, docs/CONTRACT.md §16)", async () => {
    const keyed = { headers: { authorization: `Bearer ${t.admin}` } };
    for (const res of [await t.api("/nope"), await fetch(`${t.url}/definitely/not/here`, keyed)]) {
      expect(res.status).toBe(404);
      expect(res.headers.get("content-type")).toStartWith("application/json");
      const body = await json(res);
      expectErrorShape(body);
      expect(body.error.type).toBe("not_found_error");
      expect(body.error.code).toBe("not_found");
    }
  });
});

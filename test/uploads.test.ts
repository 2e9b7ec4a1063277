// OpenAI Uploads (docs/CONTRACT.md §22): the official `openai` SDK's uploads.create,
// uploads.parts.create, uploads.complete and uploads.cancel against a real
// server — a batch file sent in parts, completed into a File made of those
// parts and run as a batch on offpeak-echo; parts named out of their upload
// order; the refusals (wrong total, a bad batch line, a wrong md5) that
// leave the upload pending; cancel and expiry removing the parts from
// storage (the data dir, or the bucket in the S3 mode); 401/403/404 on
// every route, and another project's upload.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import { sweepExpiredUploads } from "../src/uploads/service";
import { expectExactlyOnce, readResults, waitBatch } from "./helpers/batches";
import { chatLine, startTestServer, storedBlobs, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const json = (res: Response): Promise<any> => res.json();
const UPLOAD_ID = /^upload_[0-9A-Za-z]{24}$/;
const PART_ID = /^part_[0-9A-Za-z]{24}$/;
const UPLOAD_KEYS = ["bytes", "created_at", "expires_at", "file", "filename", "id", "object", "purpose", "status"];
const MiB = 1 << 20;

let t: TestServer;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "2" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
});

const enc = new TextEncoder();

/** `bytes` cut into pieces of about `size` (the last shorter), wherever the cut falls (mid-line too). */
function cut(bytes: Uint8Array, size: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, Math.min(bytes.length, at + size)));
  return out;
}

async function newUpload(bytes: number, purpose: "batch" | "user_data" = "batch", c: OpenAI = client) {
  return c.uploads.create({ bytes, filename: "big.jsonl", mime_type: "application/jsonl", purpose });
}

/** Sends `pieces` as parts in the order `order` gives (indexes into pieces); returns the part ids by piece. */
async function sendParts(uploadId: string, pieces: Uint8Array[], order = pieces.map((_, i) => i), c: OpenAI = client): Promise<string[]> {
  const ids: string[] = new Array(pieces.length);
  for (const i of order) {
    const part = await c.uploads.parts.create(uploadId, { data: await toFile(pieces[i]!, `part-${i}`) });
    expect(part.id).toMatch(PART_ID);
    expect(part.object).toBe("upload.part");
    expect(part.upload_id).toBe(uploadId);
    ids[i] = part.id;
  }
  return ids;
}

/** A part sent with fetch (for error cases the SDK would not send). */
function rawPart(uploadId: string, data: Uint8Array | Blob, key?: string | null, field = "data"): Promise<Response> {
  const form = new FormData();
  form.append(field, data instanceof Blob ? data : new Blob([data]), "part");
  return t.api(`/uploads/${uploadId}/parts`, { method: "POST", body: form, key });
}

const postJson = (path: string, body: unknown, key?: string | null) =>
  t.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), key });

/** The stored blobs that are parts of `fileId` (on disk `files/<id>.parts`, in a bucket its part objects). */
async function partsStored(fileId: string): Promise<string[]> {
  if (!t.storage) {
    const { readdirSync } = await import("node:fs");
    try {
      return readdirSync(`${t.dataDir}/files/${fileId}.parts`);
    } catch {
      return [];
    }
  }
  return (await storedBlobs(t)).filter((k) => k.includes(`${fileId}.parts/`));
}

/** The File id an upload becomes (chosen at creation; its parts are stored under it). */
async function fileIdOf(uploadId: string): Promise<string> {
  const { uploads } = t.server.ctx.db.t;
  const [row] = await t.server.ctx.db.select({ fileId: uploads.fileId }).from(uploads).where(eq(uploads.id, uploadId));
  return row!.fileId;
}

describe("official openai SDK", () => {
  test(
    "a batch file in parts (cut mid-line, sent out of order) completes into a File that runs as a batch on offpeak-echo",
    async () => {
      // About 6 MB: more than one 4 MB shard, so shards span parts too.
      const ids = Array.from({ length: 3000 }, (_, i) => `up-${i}`);
      const text = ids.map((id) => chatLine(id, `${id} ${"x".repeat(1900)}`)).join("\n") + "\n";
      const bytes = enc.encode(text);
      const pieces = cut(bytes, Math.ceil(bytes.length / 5) + 17);
      expect(pieces.length).toBe(5);

      const upload = await newUpload(bytes.length);
      expect(upload.id).toMatch(UPLOAD_ID);
      expect(Object.keys(upload).sort()).toEqual(UPLOAD_KEYS);
      expect(upload).toMatchObject({ object: "upload", bytes: bytes.length, filename: "big.jsonl", purpose: "batch", status: "pending", file: null });
      expect(upload.expires_at).toBe(upload.created_at + 3600);

      const partIds = await sendParts(upload.id, pieces, [3, 0, 4, 1, 2]);
      const done = await client.uploads.complete(upload.id, { part_ids: partIds });
      expect(done.status).toBe("completed");
      expect(done.id).toBe(upload.id);
      const file = done.file!;
      expect(file).toMatchObject({ object: "file", bytes: bytes.length, filename: "big.jsonl", purpose: "batch", status: "processed" });
      expect(await client.files.retrieve(file.id)).toEqual(file);
      // The File is the parts as they lie: nothing copied into a blob of its own.
      expect((await partsStored(file.id)).length).toBe(5);
      expect(Buffer.from(await (await client.files.content(file.id)).arrayBuffer()).equals(Buffer.from(bytes))).toBe(true);

      const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      const finished = await waitBatch(client, batch.id);
      expect(finished.status).toBe("completed");
      expect(finished.request_counts).toMatchObject({ total: ids.length, completed: ids.length, failed: 0 });
      const out = await readResults(client, finished.output_file_id);
      expectExactlyOnce(ids, out, await readResults(client, finished.error_file_id));
      // Each answer is its own line's (a shard read the right bytes across parts).
      for (const l of out) expect(JSON.stringify(l.response)).toContain(`${l.custom_id} xxx`);

      // Deleting the File removes its parts.
      await client.files.delete(file.id);
      await t.server.ctx.store.settled();
      expect(await partsStored(file.id)).toEqual([]);
    },
    SCENARIO_MS,
  );

  test("part_ids in another order than the parts were sent: the File's bytes follow part_ids; the md5 is checked", async () => {
    const pieces = [enc.encode("first piece;"), enc.encode("second piece;"), enc.encode("third")];
    const whole = Buffer.concat(pieces);
    const upload = await newUpload(whole.length, "user_data");
    const ids = await sendParts(upload.id, pieces, [2, 1, 0]);
    const wrong = await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids, md5: "0".repeat(32) });
    expect(wrong.status).toBe(400);
    expect((await json(wrong)).error).toMatchObject({ code: "invalid_value", param: "md5" });
    const md5 = new Bun.CryptoHasher("md5").update(whole).digest("hex");
    const done = await client.uploads.complete(upload.id, { part_ids: ids, md5 });
    expect(done.file!.purpose).toBe("user_data");
    expect(await (await client.files.content(done.file!.id)).text()).toBe("first piece;second piece;third");
    // Reversed, the same parts are other bytes.
    const again = await newUpload(whole.length, "user_data");
    const ids2 = await sendParts(again.id, pieces);
    const rev = await client.uploads.complete(again.id, { part_ids: [...ids2].reverse() });
    expect(await (await client.files.content(rev.file!.id)).text()).toBe("thirdsecond piece;first piece;");
  });

  test("parts of several MiB (read back in pieces at completion): every byte is checked, the md5 over them all and each line, counted across parts", async () => {
    // ≈4.6 MB in 3 parts of ≈1.5 MiB: each part is read in more than one piece, the last of each shorter.
    const lines = Array.from({ length: 2400 }, (_, i) => chatLine(`mib-${i}`, `${i} ${"y".repeat(1800)}`));
    const bytes = enc.encode(lines.join("\n") + "\n");
    const pieces = cut(bytes, Math.ceil(bytes.length / 3));
    expect(pieces.length).toBe(3);
    expect(pieces[2]!.length).toBeGreaterThan(MiB);
    const md5 = new Bun.CryptoHasher("md5").update(bytes).digest("hex");
    const upload = await newUpload(bytes.length);
    const ids = await sendParts(upload.id, pieces);
    const wrong = await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids, md5: md5.replace(/^./, (c) => (c === "0" ? "1" : "0")) });
    expect(wrong.status).toBe(400);
    expect((await json(wrong)).error).toMatchObject({ code: "invalid_value", param: "md5" });
    const done = await client.uploads.complete(upload.id, { part_ids: ids, md5 });
    expect(done.file!.bytes).toBe(bytes.length);
    expect(Buffer.from(await (await client.files.content(done.file!.id)).arrayBuffer()).equals(Buffer.from(bytes))).toBe(true);

    // A bad line past the first MiB of the last part: named by its line in the whole file.
    const bad = [...lines];
    bad[2300] = '{"custom_id": "mib-2300", "method": "GET", "url": "/v1/chat/completions", "body": {"model": "offpeak-echo"}}';
    const badBytes = enc.encode(bad.join("\n") + "\n");
    const u2 = await newUpload(badBytes.length);
    const res = await postJson(`/uploads/${u2.id}/complete`, { part_ids: await sendParts(u2.id, cut(badBytes, Math.ceil(badBytes.length / 3))) });
    expect(res.status).toBe(400);
    expect((await json(res)).error.message).toMatch(/^Invalid batch file: line 2301: /);
  });

  test("parts that do not add up to bytes: 400 naming both sizes; the upload stays pending, parts not named are removed at completion", async () => {
    const pieces = [enc.encode(chatLine("a") + "\n"), enc.encode(chatLine("b") + "\n")];
    const total = pieces[0]!.length + pieces[1]!.length;
    const upload = await newUpload(total);
    const fileId = await fileIdOf(upload.id);
    const ids = await sendParts(upload.id, pieces);
    const short = await postJson(`/uploads/${upload.id}/complete`, { part_ids: [ids[0]] });
    expect(short.status).toBe(400);
    const err = (await json(short)).error;
    expect(err).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: "part_ids" });
    expect(err.message).toContain(`${pieces[0]!.length} bytes`);
    expect(err.message).toContain(`bytes=${total}`);
    // Still pending: an extra part, then the right ones.
    const [extra] = await sendParts(upload.id, [enc.encode("never named")]);
    expect(extra).toMatch(PART_ID);
    expect((await partsStored(fileId)).length).toBe(3);
    const done = await client.uploads.complete(upload.id, { part_ids: ids });
    expect(done.file!.id).toBe(fileId);
    await t.server.ctx.store.settled();
    expect((await partsStored(fileId)).length).toBe(2);
    // Unknown and repeated part ids are named.
    const other = await newUpload(total);
    const [p] = await sendParts(other.id, [pieces[0]!]);
    for (const part_ids of [[p, extra], [p, p], []]) {
      const res = await postJson(`/uploads/${other.id}/complete`, { part_ids });
      expect(res.status).toBe(400);
      expect((await json(res)).error.param).toBe("part_ids");
    }
  });

  test("a bad batch line refuses completion naming its line (counted across parts); the upload stays pending", async () => {
    const lines = Array.from({ length: 40 }, (_, i) => chatLine(`bad-${i}`));
    lines[27] = '{"custom_id": "bad-27", "method": "GET", "url": "/v1/chat/completions", "body": {"model": "offpeak-echo"}}';
    const bytes = enc.encode(lines.join("\n") + "\n");
    const upload = await newUpload(bytes.length);
    const ids = await sendParts(upload.id, cut(bytes, 1000));
    const res = await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids });
    expect(res.status).toBe(400);
    const err = (await json(res)).error;
    expect(err.message).toMatch(/^Invalid batch file: line 28: /);
    expect(err.param).toBe("method");
    // Pending still: it takes parts (and a cancel) after the refusal.
    expect((await rawPart(upload.id, enc.encode("more"))).status).toBe(200);
    expect((await client.uploads.cancel(upload.id)).status).toBe("cancelled");
    // A duplicate custom_id in another part is found too.
    const dup = enc.encode([chatLine("same"), chatLine("other"), chatLine("same")].join("\n") + "\n");
    const u2 = await newUpload(dup.length);
    const res2 = await postJson(`/uploads/${u2.id}/complete`, { part_ids: await sendParts(u2.id, cut(dup, 100)) });
    expect(res2.status).toBe(400);
    expect((await json(res2)).error).toMatchObject({ code: "duplicate_custom_id", message: expect.stringMatching(/^Invalid batch file: line 3: /) });
  });

  test("cancel removes the parts from storage; a cancelled upload refuses parts, completion and cancel with 400", async () => {
    const upload = await newUpload(30, "user_data");
    const fileId = await fileIdOf(upload.id);
    const ids = await sendParts(upload.id, [enc.encode("0123456789"), enc.encode("abcdefghij")]);
    expect((await partsStored(fileId)).length).toBe(2);
    const cancelled = await client.uploads.cancel(upload.id);
    expect(cancelled).toMatchObject({ id: upload.id, status: "cancelled", file: null });
    await t.server.ctx.store.settled();
    expect(await partsStored(fileId)).toEqual([]);
    for (const res of [
      await rawPart(upload.id, enc.encode("0123456789")),
      await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids }),
      await t.api(`/uploads/${upload.id}/cancel`, { method: "POST" }),
    ]) {
      expect(res.status).toBe(400);
      expect((await json(res)).error.message).toContain("it is cancelled");
    }
    // Nothing of it is left in storage (the refused part neither).
    await t.server.ctx.store.settled();
    expect(await partsStored(fileId)).toEqual([]);
  });

  test("a completed upload refuses more parts, another completion and cancel", async () => {
    const upload = await newUpload(4, "user_data");
    const ids = await sendParts(upload.id, [enc.encode("done")]);
    await client.uploads.complete(upload.id, { part_ids: ids });
    for (const res of [
      await rawPart(upload.id, enc.encode("more")),
      await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids }),
      await t.api(`/uploads/${upload.id}/cancel`, { method: "POST" }),
    ]) {
      expect(res.status).toBe(400);
      expect((await json(res)).error.message).toContain("it is completed");
    }
  });

  test("after its hour a pending upload is expired: its parts are removed by the sweep and it takes nothing more", async () => {
    const upload = await newUpload(10, "user_data");
    const fileId = await fileIdOf(upload.id);
    const ids = await sendParts(upload.id, [enc.encode("0123456789")]);
    const { uploads } = t.server.ctx.db.t;
    await t.server.ctx.db.update(uploads).set({ expiresAt: Math.floor(Date.now() / 1000) - 1 }).where(eq(uploads.id, upload.id));
    const res = await postJson(`/uploads/${upload.id}/complete`, { part_ids: ids });
    expect(res.status).toBe(400);
    expect((await json(res)).error.message).toContain("it is expired");
    // The server's own sweep may have taken it already (then this one finds none).
    await sweepExpiredUploads(t.server.ctx);
    await t.server.ctx.store.settled();
    expect(await partsStored(fileId)).toEqual([]);
    expect((await rawPart(upload.id, enc.encode("x"))).status).toBe(400);
  });
});

describe("bad input", () => {
  test("POST /uploads checks its body as POST /files does: purpose, filename, bytes (413 over max_file_bytes), expires_after", async () => {
    const ok = { bytes: 10, filename: "a.jsonl", mime_type: "application/jsonl", purpose: "batch" };
    const cases: [Record<string, unknown>, number, string][] = [
      [{ ...ok, purpose: "nonsense" }, 400, "purpose"],
      [{ ...ok, filename: "" }, 400, "filename"],
      [{ ...ok, filename: "x".repeat(1025) }, 400, "filename"],
      [{ ...ok, bytes: 0 }, 400, "bytes"],
      [{ ...ok, bytes: "10" }, 400, "bytes"],
      [{ ...ok, bytes: t.server.ctx.config.maxFileBytes + 1 }, 413, "bytes"],
      [{ ...ok, mime_type: undefined }, 400, "mime_type"],
      [{ ...ok, expires_after: { anchor: "created_at", seconds: 60 } }, 400, "expires_after.seconds"],
      [{ ...ok, expires_after: { anchor: "last_active_at", seconds: 3600 } }, 400, "expires_after.anchor"],
    ];
    const { uploads } = t.server.ctx.db.t;
    const before = (await t.server.ctx.db.select().from(uploads)).length;
    for (const [body, status, param] of cases) {
      const res = await postJson("/uploads", body);
      expect([JSON.stringify(body).slice(0, 80), res.status]).toEqual([JSON.stringify(body).slice(0, 80), status]);
      expect((await json(res)).error.param).toBe(param);
    }
    expect((await t.server.ctx.db.select().from(uploads)).length).toBe(before);
    // expires_after is the File's.
    const u = await client.uploads.create({ ...ok, bytes: 3, purpose: "user_data", expires_after: { anchor: "created_at", seconds: 7200 } });
    const done = await client.uploads.complete(u.id, { part_ids: await sendParts(u.id, [enc.encode("abc")]) });
    expect(done.file!.expires_at).toBe(done.file!.created_at + 7200);
  });

  test("a part: one data field of 1 byte to 64 MiB (413 beyond), multipart only; a refused part stores nothing", async () => {
    const upload = await newUpload(100, "user_data");
    const fileId = await fileIdOf(upload.id);
    const big = await rawPart(upload.id, new Blob([new Uint8Array(64 * MiB + 1)]));
    expect(big.status).toBe(413);
    expect((await json(big)).error).toMatchObject({ code: "file_too_large", param: "data" });
    const empty = await rawPart(upload.id, new Uint8Array(0));
    expect(empty.status).toBe(400);
    expect((await json(empty)).error.param).toBe("data");
    const noData = await rawPart(upload.id, enc.encode("abc"), undefined, "file");
    expect(noData.status).toBe(400);
    expect((await json(noData)).error).toMatchObject({ code: "missing_field", param: "data" });
    const notMultipart = await t.api(`/uploads/${upload.id}/parts`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(notMultipart.status).toBe(400);
    expect((await json(notMultipart)).error.param).toBe("content-type");
    await t.server.ctx.store.settled();
    expect(await partsStored(fileId)).toEqual([]);
    if (!t.storage) expect((await storedBlobs(t)).filter((n) => n.startsWith("tmp/") && n.includes(fileId))).toEqual([]);
  });
});

describe("keys and projects", () => {
  test("every route: 401 without a key, 403 without files:write, 404 for an unknown id and for another project's upload", async () => {
    const reader = await t.createKey({ scopes: ["files:read", "batches:write"] });
    const other = await t.createKey({ project: "elsewhere" });
    const upload = await newUpload(5, "user_data");
    const [part] = await sendParts(upload.id, [enc.encode("hello")]);
    const unknown = "upload_" + "0".repeat(24);
    const routes: [string, (id: string, key?: string | null) => Promise<Response>][] = [
      ["create", (_id, key) => postJson("/uploads", { bytes: 5, filename: "a", mime_type: "text/plain", purpose: "user_data" }, key)],
      ["parts", (id, key) => rawPart(id, enc.encode("hello"), key)],
      ["complete", (id, key) => postJson(`/uploads/${id}/complete`, { part_ids: [part] }, key)],
      ["cancel", (id, key) => t.api(`/uploads/${id}/cancel`, { method: "POST", key })],
    ];
    for (const [name, call] of routes) {
      expect([name, (await call(upload.id, null)).status]).toEqual([name, 401]);
      expect([name, (await call(upload.id, "sk-op-" + "x".repeat(40))).status]).toEqual([name, 401]);
      const forbidden = await call(upload.id, reader);
      expect([name, forbidden.status]).toEqual([name, 403]);
      expect((await json(forbidden)).error.code).toBe("insufficient_scope");
      if (name === "create") continue;
      for (const [id, key] of [
        [unknown, undefined],
        ["upload_../../etc", undefined],
        [upload.id, other],
      ] as const) {
        const res = await call(id, key);
        expect([name, id, res.status]).toEqual([name, id, 404]);
      }
    }
    // The /v1 mount answers too, and the upload is untouched by the refused calls.
    const v1 = await fetch(`${t.url}/v1/uploads/${upload.id}/complete`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.admin}`, "content-type": "application/json" },
      body: JSON.stringify({ part_ids: [part] }),
    });
    expect(v1.status).toBe(200);
    expect((await json(v1)).status).toBe("completed");
  });
});

// The Python SDK's upload_file_chunked, where a python that has it is there
// (OFFPEAK_PYTHON, as test/python-sdk.test.ts, which says out loud when it is not).
const python = process.env.OFFPEAK_PYTHON || "python3";
const pythonSdk = (() => {
  if (!Bun.which(python) && !python.includes("/")) return false;
  try {
    return Bun.spawnSync([python, "-c", "import openai"], { stderr: "pipe" }).exitCode === 0;
  } catch {
    return false;
  }
})();

test.skipIf(!pythonSdk)(
  `the Python SDK's uploads.upload_file_chunked (${python}): a batch file in parts, completed with its md5, run as a batch`,
  async () => {
    const proc = Bun.spawn([python, join(import.meta.dir, "python", "uploads_check.py")], {
      env: { ...process.env, OPENAI_BASE_URL: t.base, OPENAI_API_KEY: t.admin, PYTHONDONTWRITEBYTECODE: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    if (code !== 0) throw new Error(`uploads_check.py exited ${code}\n${out}\n${err}`);
    expect(out).toContain("all ok");
  },
  SCENARIO_MS,
);

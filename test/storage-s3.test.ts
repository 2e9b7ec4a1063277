// Files on S3 (docs/CONTRACT.md §14): the Files and Batch APIs with
// --storage-url s3://BUCKET/PREFIX against a real S3-compatible server that
// the test starts itself (s3rver from npm: ./helpers/s3.ts). Uploads stream
// to the bucket and a rejected one leaves nothing there (nor an unfinished
// multipart upload); downloads stream with Range (also across the parts of
// a composed output file); deletes remove the objects; a batch's output and
// error files are its Workers' part objects, with the same content as on the
// local disk; a restart on the same data dir and bucket resumes a batch and
// cleans what a crash left. (The whole files and batch suites also run
// against the bucket with OFFPEAK_TEST_STORAGE=s3.)
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import { ConfigError, resolveConfig } from "../src/config";
import { chatReq, createBatch, expectExactlyOnce, pollUntil, readResults, waitBatch } from "./helpers/batches";
import { sharedS3, type TestS3 } from "./helpers/s3";
import OpenAI from "openai";
import { ADMIN_KEY, freshDataDir, SERVE_READY, startTestServer, uploadRaw, type TestServer } from "./helpers/server";
import { needs } from "./helpers/wait";

const MiB = 1 << 20;

let s3: TestS3;
let t: TestServer;

beforeAll(async () => {
  s3 = await sharedS3();
  t = await startTestServer({ storage: "s3", argv: ["--max-file-bytes", String(16 * MiB)], env: { OFFPEAK_BATCH_WORKERS: "2" } });
});
afterAll(async () => {
  await t?.stop();
});

const objectKey = (srv: TestServer, key: string) => `${srv.storage!.prefix}/${key}`;
/** Keys under the server's prefix, without it. */
const stored = async (srv: TestServer = t) => (await s3.keys(`${srv.storage!.prefix}/`)).map((k) => k.slice(srv.storage!.prefix.length + 1));
const journal = (srv: TestServer = t) => readdirSync(join(srv.dataDir, "s3-pending"));
const settle = (srv: TestServer = t) => srv.server.ctx.store.settled();

/** Bytes that are not text: every value, in an order that shows a misplaced chunk. */
function binary(n: number): Uint8Array<ArrayBuffer> {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7919 + (i >> 13)) & 0xff;
  return b;
}

async function upload(body: string | Uint8Array, purpose = "user_data", name = "f.bin") {
  const res = await uploadRaw(t, body, purpose, name);
  const json = (await res.json()) as any;
  if (res.status !== 200) throw new Error(`upload: ${res.status} ${JSON.stringify(json)}`);
  return json as { id: string; bytes: number };
}

describe("config", () => {
  test("storage.url: file: by default; s3://BUCKET[/PREFIX] with the S3_* names first, then AWS_*; flag > env > file", () => {
    expect(resolveConfig([], {}).storage).toEqual({ kind: "file" });
    const env = { S3_ENDPOINT: "http://s3.local:9000", AWS_ENDPOINT: "http://ignored", AWS_REGION: "eu-west-1", AWS_ACCESS_KEY_ID: "id", S3_SECRET_ACCESS_KEY: "secret" };
    expect(resolveConfig(["--storage-url", "s3://bkt/a/b/"], env).storage).toEqual({
      kind: "s3",
      url: "s3://bkt/a/b",
      prefix: "a/b",
      s3: { bucket: "bkt", endpoint: "http://s3.local:9000", region: "eu-west-1", accessKeyId: "id", secretAccessKey: "secret" },
    });
    expect(resolveConfig([], { OFFPEAK_STORAGE_URL: "s3://bkt" }).storage).toMatchObject({ kind: "s3", prefix: "", url: "s3://bkt" });
    expect(resolveConfig(["--storage-url", "file:"], { OFFPEAK_STORAGE_URL: "s3://bkt" }).storage).toEqual({ kind: "file" });
    for (const bad of ["s3://", "gs://bkt", "/var/files"]) expect(() => resolveConfig(["--storage-url", bad], {})).toThrow(ConfigError);
  });
});

describe("files", () => {
  const big = binary(12 * MiB + 12345);
  let bigId: string;

  test("an upload streams to the bucket: a 12 MB file is one object with the exact bytes; nothing on the local disk", async () => {
    const f = await upload(big);
    bigId = f.id;
    expect(f.bytes).toBe(big.length);
    const obj = s3.client.file(objectKey(t, f.id));
    expect(new Uint8Array(await obj.arrayBuffer())).toEqual(big);
    expect(await stored()).toContain(f.id);
    expect(journal()).toEqual([]);
    expect(s3.pendingUploads()).toEqual([]);
    expect(existsSync(join(t.dataDir, "files"))).toBe(false);
    const list = (await (await t.api("/files?purpose=user_data")).json()) as any;
    expect(list.data.map((x: any) => x.id)).toEqual([f.id]);
  });

  test("downloads stream through the node, with Range: whole, first and last byte, suffix, middle, open end, 416", async () => {
    needs(bigId, "an upload streams to the bucket: a 12 MB file is one object with the exact bytes; nothing on the local disk");
    const whole = await t.api(`/files/${bigId}/content`);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("location")).toBeNull();
    expect(new Uint8Array(await whole.arrayBuffer())).toEqual(big);
    const n = big.length;
    for (const [range, from, to] of [
      ["bytes=0-0", 0, 0],
      [`bytes=${n - 1}-${n - 1}`, n - 1, n - 1],
      ["bytes=-5", n - 5, n - 1],
      [`bytes=${5 * MiB - 3}-${5 * MiB + 2}`, 5 * MiB - 3, 5 * MiB + 2],
      [`bytes=${n - 100}-`, n - 100, n - 1],
    ] as const) {
      const res = await t.api(`/files/${bigId}/content`, { headers: { range } });
      expect(res.status).toBe(206);
      expect(res.headers.get("content-range")).toBe(`bytes ${from}-${to}/${n}`);
      expect(new Uint8Array(await res.arrayBuffer())).toEqual(big.subarray(from, to + 1));
    }
    const bad = await t.api(`/files/${bigId}/content`, { headers: { range: `bytes=${n}-` } });
    expect(bad.status).toBe(416);
    expect(bad.headers.get("content-range")).toBe(`bytes */${n}`);
  });

  test("rejected uploads leave nothing in the bucket: a bad line, a duplicate custom_id (read back from the bucket), over max_file_bytes", async () => {
    const before = await stored();
    const lines = Array.from({ length: 200 }, (_, i) => chatReq(`r-${i}`, "x"));
    const badLine = [...lines.slice(0, 100), "{not json", ...lines.slice(100)].join("\n") + "\n";
    const dup = [...lines, lines[7]].join("\n") + "\n";
    for (const [body, purpose, status, code] of [
      [badLine, "batch", 400, null],
      [dup, "batch", 400, "duplicate_custom_id"],
      [binary(17 * MiB), "user_data", 413, "file_too_large"],
    ] as const) {
      const res = await uploadRaw(t, body, purpose);
      expect(res.status).toBe(status);
      const err = ((await res.json()) as any).error;
      if (code) expect(err.code).toBe(code);
    }
    await settle();
    expect(await stored()).toEqual(before);
    expect(journal()).toEqual([]);
    // The 17 MB upload had begun a multipart upload: it is ended, not left behind.
    expect(s3.pendingUploads()).toEqual([]);
  });

  test("DELETE removes the object, off the request path", async () => {
    const f = await upload("short text", "user_data", "a.txt");
    expect(await stored()).toContain(f.id);
    expect((await t.api(`/files/${f.id}`, { method: "DELETE" })).status).toBe(200);
    await settle();
    expect(await stored()).not.toContain(f.id);
    expect(journal()).toEqual([]);
    expect((await t.api(`/files/${f.id}/content`)).status).toBe(404);
  });

  test("GET /status checks the bucket", async () => {
    const status = (await (await t.api("/status")).json()) as any;
    expect(status.storage).toEqual({ ok: true, free_bytes: null });
  });
});

// ≈4.2 kB a line: 3,000 lines ≈ 12.6 MB → 4 shards of ≤ 4 MB; every 97th
// line is refused by the echo model (n: 0), so the error file has parts too.
const N = 3000;
const PAD = "lorem ipsum ".repeat(340);
const ids = Array.from({ length: N }, (_, i) => `c-${i}`);
const lines = ids.map((id, i) => chatReq(id, `${id} ${PAD}`, i % 97 === 5 ? { n: 0 } : {}));
/** What differs between two runs of the same batch: generated ids and timestamps. */
const normalized = (text: string) => text.replace(/(batch_req_|req_|chatcmpl-)[0-9A-Za-z]{24}/g, "$1…").replace(/"created":\d+/g, '"created":0');

describe("a batch on S3", () => {
  let batch: Awaited<ReturnType<ReturnType<TestServer["sdk"]>["batches"]["retrieve"]>>;
  let outText: string;
  let errText: string;

  beforeAll(async () => {
    const { batch: created } = await createBatch(t.sdk(), lines);
    batch = await waitBatch(t.sdk(), created.id, undefined, 60_000);
    outText = await (await t.api(`/files/${batch.output_file_id}/content`)).text();
    errText = await (await t.api(`/files/${batch.error_file_id}/content`)).text();
  });

  const partsOf = (fileId: string) => {
    const { fileParts } = t.server.ctx.db.t;
    return t.server.ctx.db.select().from(fileParts).where(eq(fileParts.fileId, fileId)).orderBy(fileParts.idx);
  };

  test("completes; its output and error files are the Workers' part objects, in order, and nothing stays on the local disk", async () => {
    expect(batch.status).toBe("completed");
    expect(batch.request_counts!.total).toBe(N);
    for (const [fileId, text] of [
      [batch.output_file_id!, outText],
      [batch.error_file_id!, errText],
    ] as const) {
      const { files } = t.server.ctx.db.t;
      const [row] = await t.server.ctx.db.select().from(files).where(eq(files.id, fileId));
      const parts = await partsOf(fileId);
      expect(parts.length).toBe(row!.parts!);
      expect(parts.length).toBeGreaterThanOrEqual(3);
      const objects = await Promise.all(parts.map((p) => s3.client.file(objectKey(t, p.key)).arrayBuffer()));
      expect(objects.map((o) => o.byteLength)).toEqual(parts.map((p) => p.bytes));
      expect(Buffer.concat(objects.map((o) => new Uint8Array(o))).toString()).toBe(text);
      expect(row!.bytes).toBe(Buffer.byteLength(text));
    }
    const out = await readResults(t.sdk(), batch.output_file_id);
    const err = await readResults(t.sdk(), batch.error_file_id);
    expectExactlyOnce(ids, out, err);
    expect([...out, ...err].map((l) => l.custom_id).sort()).toEqual([...ids].sort());
    await pollUntil(async () => existsSync(join(t.dataDir, "batches", batch.id)), (e) => !e, 5000, 50, "the batch's working directory to go");
  });

  test("Range across the parts of a composed file: first and last byte, a boundary, a suffix", async () => {
    const body = Buffer.from(outText);
    const n = body.length;
    const b = (await partsOf(batch.output_file_id!))[0]!.bytes;
    for (const [range, from, to] of [
      ["bytes=0-0", 0, 0],
      [`bytes=${n - 1}-`, n - 1, n - 1],
      [`bytes=${b - 10}-${b + 9}`, b - 10, b + 9],
      [`bytes=-${n - b + 5}`, b - 5, n - 1],
    ] as const) {
      const res = await t.api(`/files/${batch.output_file_id}/content`, { headers: { range } });
      expect(res.status).toBe(206);
      expect(res.headers.get("content-range")).toBe(`bytes ${from}-${to}/${n}`);
      expect(Buffer.from(await res.arrayBuffer()).equals(body.subarray(from, to + 1))).toBe(true);
    }
    expect((await t.api(`/files/${batch.output_file_id}/content`, { headers: { range: `bytes=${n}-` } })).status).toBe(416);
  });

  test("the same content as the same batch on the local disk (generated ids and timestamps aside)", async () => {
    const local = await startTestServer({ storage: "file", env: { OFFPEAK_BATCH_WORKERS: "2" } });
    try {
      const { batch: created } = await createBatch(local.sdk(), lines);
      const done = await waitBatch(local.sdk(), created.id, undefined, 60_000);
      const localOut = await (await local.api(`/files/${done.output_file_id}/content`)).text();
      const localErr = await (await local.api(`/files/${done.error_file_id}/content`)).text();
      expect(localOut.length).toBe(outText.length);
      expect(normalized(outText) === normalized(localOut)).toBe(true);
      expect(normalized(errText) === normalized(localErr)).toBe(true);
    } finally {
      await local.stop();
    }
  });

  test("deleting a composed file removes every part object", async () => {
    const fileId = batch.error_file_id!;
    expect((await stored()).filter((k) => k.startsWith(`${fileId}.parts/`)).length).toBe((await partsOf(fileId)).length);
    expect((await t.api(`/files/${fileId}`, { method: "DELETE" })).status).toBe(200);
    await settle();
    expect((await stored()).filter((k) => k.startsWith(fileId))).toEqual([]);
    expect(journal()).toEqual([]);
  });
});

describe("restart on the same data dir and bucket", () => {
  test("a running batch resumes and ends exact; what a crash left in the bucket is removed at start", async () => {
    const dir = mkdtempSync(join(tmpdir(), "offpeak-s3-cfg-"));
    // 16 lines at a time, 20 ms each: 800 lines take ≈1 s.
    const config = join(dir, "config.json");
    writeFileSync(config, JSON.stringify({ models: { "offpeak-echo": { latency_ms: 20, max_concurrency: 16 } } }));
    const dataDir = freshDataDir();
    const first = await startTestServer({ storage: "s3", dataDir, argv: ["--config", config] });
    const { url, env } = first.storage!;
    const again = { dataDir, argv: ["--config", config, "--storage-url", url], env };
    let second: TestServer | null = null;
    try {
      const few = Array.from({ length: 800 }, (_, i) => chatReq(`s-${i}`, `line ${i}`));
      const { file, batch } = await createBatch(first.sdk(), few);
      await pollUntil(() => first.sdk().batches.retrieve(batch.id), (b) => (b.request_counts?.completed ?? 0) >= 100, 20_000, 20, "some progress");
      await first.stop();

      // What a crash could leave: an upload completed but never recorded, with its journal entry.
      const orphan = `${first.storage!.prefix}/file-orphan000000000000000000`;
      await s3.client.write(orphan, "left by a crash");
      writeFileSync(join(dataDir, "s3-pending", `upload.${encodeURIComponent("file-orphan000000000000000000")}`), "");

      second = await startTestServer(again);
      const done = await waitBatch(second.sdk(), batch.id, undefined, 30_000);
      expect(done.status).toBe("completed");
      expectExactlyOnce(
        few.map((_, i) => `s-${i}`),
        await readResults(second.sdk(), done.output_file_id),
        await readResults(second.sdk(), done.error_file_id),
      );
      // The input file was read from the bucket by the restarted server.
      expect((await (await second.api(`/files/${file.id}/content`)).text()).split("\n").length).toBe(few.length + 1);
      await settle(second);
      expect(await s3.client.exists(orphan)).toBe(false);
      expect(journal(second)).toEqual([]);
    } finally {
      await second?.stop();
      if (!second) await first.stop().catch(() => {});
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("SIGKILL mid-batch", () => {
  test("a restart on the same data dir and bucket finishes the batch exactly once; its parts are in the bucket", async () => {
    const dir = mkdtempSync(join(tmpdir(), "offpeak-s3-kill-"));
    const config = join(dir, "config.json");
    // 32 lines at a time, 20 ms each: 2,000 lines take ≈1.3 s.
    writeFileSync(config, JSON.stringify({ models: { "offpeak-echo": { latency_ms: 20, max_concurrency: 32 } } }));
    const dataDir = join(dir, "data");
    const prefix = `kill${Date.now().toString(36)}`;
    const env: Record<string, string> = { ...process.env, ...s3.env, OFFPEAK_STORAGE_URL: `s3://${s3.bucket}/${prefix}`, OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn", OFFPEAK_BATCH_WORKERS: "2" };
    const start = async () => {
      const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "src", "main.ts"), "serve", "--port", "0", "--data-dir", dataDir, "--config", config], {
        env,
        stdin: "ignore",
        stdout: "pipe",
        stderr: "inherit",
      });
      let out = "";
      const reader = proc.stdout.getReader();
      while (!SERVE_READY.test(out)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the server exited: ${out}`);
        out += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      void proc.stdout.pipeTo(new WritableStream()).catch(() => {});
      const url = SERVE_READY.exec(out)![1]!;
      return { proc, client: new OpenAI({ apiKey: ADMIN_KEY, baseURL: `${url}/api/v1`, maxRetries: 0 }) };
    };
    let live: Awaited<ReturnType<typeof start>> | null = null;
    try {
      live = await start();
      // ≈2.3 kB a line: ≈4.6 MB, two shards.
      const pad = "pad ".repeat(560);
      const keep = Array.from({ length: 2000 }, (_, i) => `k-${i}`);
      const { batch } = await createBatch(
        live.client,
        keep.map((id) => chatReq(id, `${id} ${pad}`)),
      );
      await pollUntil(() => live!.client.batches.retrieve(batch.id), (b) => (b.request_counts?.completed ?? 0) >= 400, 20_000, 10, "some progress");
      live.proc.kill("SIGKILL");
      await live.proc.exited;
      live = await start();
      const done = await waitBatch(live.client, batch.id, undefined, 30_000);
      expect(done.status).toBe("completed");
      const out = await readResults(live.client, done.output_file_id);
      const err = await readResults(live.client, done.error_file_id);
      expectExactlyOnce(keep, out, err);
      expect(err).toEqual([]);
      // One part object per shard is what the file is made of (its part rows); a shard the killed
      // run had finished and uploaded, but not yet recorded, was run again under a new claim, and
      // its earlier object (NAME.parts/IDX.CLAIM with a lower claim) stays until the file is deleted.
      const under = `${prefix}/${done.output_file_id}.parts/`;
      const objects = (await s3.keys(under)).map((k) => k.slice(under.length));
      const parts = objects.filter((k) => /^\d+\.\d+$/.test(k));
      expect({ shards: [...new Set(parts.map((k) => k.split(".")[0]))].sort(), objects: parts.length <= 4 }).toEqual({ shards: ["0", "1"], objects: true });
    } finally {
      if (live) {
        live.proc.kill("SIGTERM");
        await live.proc.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

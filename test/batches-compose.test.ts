// Composed result files: a batch's output and error files are
// made of its shards' part files, in shard order, without copying a byte.
// On a real batch with several shards (a 4 MB shard each, src/batches/
// shards.ts, so a ≈20 MB input makes 5), GET /files/{id}/content must give
// exactly the concatenation of the parts (what the old finalize wrote into
// one file), every custom_id once and in input order (the echo model keeps
// a shard's order); Range works across part boundaries; leftovers are gone
// after the batch ends; deleting (or expiring) a composed file removes all
// its parts. Also: the event-loop delay metric.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import OpenAI from "openai";
import { sweepExpiredFiles } from "../src/files/service";
import { sweepBatchLeftovers } from "../src/batches/finalize";
import { trashIn } from "../src/storage/trash";
import { chatReq, createBatch, pollUntil, waitBatch } from "./helpers/batches";
import { startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
let client: OpenAI;

// ≈4.2 kB a line: 5,000 lines ≈ 21 MB → 6 shards of ≤ 4 MB. Every 97th line
// is refused by the echo model (n: 0), so the error file has a part in
// every shard too.
const N = 5000;
const PAD = "lorem ipsum ".repeat(340);
const ids = Array.from({ length: N }, (_, i) => `c-${i}`);
const bad = (i: number) => i % 97 === 5;
const lines = ids.map((id, i) => chatReq(id, `${id} ${PAD}`, bad(i) ? { n: 0 } : {}));

let batch: Awaited<ReturnType<OpenAI["batches"]["retrieve"]>>;
let outBody: Uint8Array;
let errBody: Uint8Array;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "2" } });
  client = t.sdk();
  const { batch: created } = await createBatch(client, lines);
  batch = await waitBatch(client, created.id, undefined, 60_000);
  outBody = new Uint8Array(await (await t.api(`/files/${batch.output_file_id}/content`)).arrayBuffer());
  errBody = new Uint8Array(await (await t.api(`/files/${batch.error_file_id}/content`)).arrayBuffer());
});

afterAll(async () => {
  await t?.stop();
});

const partsDir = (fileId: string) => join(t.dataDir, "files", `${fileId}.parts`);
const partsOf = (fileId: string) => {
  const { fileParts } = t.server.ctx.db.t;
  return t.server.ctx.db.select().from(fileParts).where(eq(fileParts.fileId, fileId)).orderBy(fileParts.idx);
};
const fileRow = async (id: string) => {
  const { files } = t.server.ctx.db.t;
  return (await t.server.ctx.db.select().from(files).where(eq(files.id, id)))[0]!;
};
/** The stored parts' names: files in the part directory, or (OFFPEAK_TEST_STORAGE=s3) part objects once removals in the background are done. */
async function storedParts(fileId: string): Promise<string[]> {
  if (!t.storage) return existsSync(partsDir(fileId)) ? readdirSync(partsDir(fileId)) : [];
  await t.server.ctx.store.settled();
  return t.storage.s3.keys(`${t.storage.prefix}/${fileId}.parts/`);
}
/** The stored parts, in part order: what the old finalize concatenated. */
const concatOnDisk = async (fileId: string) =>
  Buffer.concat(
    await Promise.all(
      (await partsOf(fileId)).map(async (p) =>
        t.storage ? new Uint8Array(await t.storage.s3.client.file(`${t.storage.prefix}/${p.key}`).arrayBuffer()) : readFileSync(join(t.dataDir, "files", p.key)),
      ),
    ),
  );
const customIds = (body: Uint8Array) =>
  new TextDecoder()
    .decode(body)
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l).custom_id as string);

describe("a batch with several shards", () => {
  test("completes with composed output and error files, each of several parts", async () => {
    expect(batch.status).toBe("completed");
    const nBad = ids.filter((_, i) => bad(i)).length;
    expect(batch.request_counts).toEqual({ total: N, completed: N - nBad, failed: nBad });
    const out = await fileRow(batch.output_file_id!);
    const err = await fileRow(batch.error_file_id!);
    expect(out.parts).toBeGreaterThanOrEqual(5);
    expect(err.parts).toBeGreaterThanOrEqual(5);
    expect((await partsOf(out.id)).length).toBe(out.parts!);
    expect(out.bytes).toBe((await partsOf(out.id)).reduce((a, p) => a + p.bytes, 0));
    expect((await storedParts(out.id)).length).toBe(out.parts!);
  });

  test("the content is byte-identical to the parts concatenated in order; every custom_id once, in input order", async () => {
    for (const [id, body] of [
      [batch.output_file_id!, outBody],
      [batch.error_file_id!, errBody],
    ] as const) {
      const expected = await concatOnDisk(id);
      expect(body.length).toBe(expected.length);
      expect(Buffer.from(body).equals(expected)).toBe(true);
    }
    expect(customIds(outBody)).toEqual(ids.filter((_, i) => !bad(i)));
    expect(customIds(errBody)).toEqual(ids.filter((_, i) => bad(i)));
  });

  test("the full download's length: Content-Length (whichever storage: src/storage/sized.ts), and the record's bytes", async () => {
    const res = await t.api(`/files/${batch.output_file_id}/content`);
    expect(res.headers.get("content-length")).toBe(String(outBody.length));
    expect((await res.arrayBuffer()).byteLength).toBe(outBody.length);
    expect((await client.files.retrieve(batch.output_file_id!)).bytes).toBe(outBody.length);
  });
});

describe("Range across part boundaries", () => {
  const get = (fileId: string, range: string) => t.api(`/files/${fileId}/content`, { headers: { range } });

  /** Where each part starts in the file, and the file's size. */
  async function boundaries(fileId: string): Promise<{ starts: number[]; size: number }> {
    const starts: number[] = [];
    let at = 0;
    for (const p of await partsOf(fileId)) {
      starts.push(at);
      at += p.bytes;
    }
    return { starts, size: at };
  }

  async function expectRange(fileId: string, body: Uint8Array, range: string, start: number, end: number) {
    const res = await get(fileId, range);
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes ${start}-${end}/${body.length}`);
    expect(res.headers.get("content-length")).toBe(String(end - start + 1));
    const got = new Uint8Array(await res.arrayBuffer());
    expect(got.length).toBe(end - start + 1);
    expect(Buffer.from(got).equals(Buffer.from(body.subarray(start, end + 1)))).toBe(true);
    return res;
  }

  test("first byte, last byte", async () => {
    const size = outBody.length;
    const first = await expectRange(batch.output_file_id!, outBody, "bytes=0-0", 0, 0);
    if (!t.storage) expect(first.headers.get("content-length")).toBe("1"); // inside one part: served natively
    await expectRange(batch.output_file_id!, outBody, `bytes=${size - 1}-${size - 1}`, size - 1, size - 1);
    await expectRange(batch.output_file_id!, outBody, `bytes=${size - 1}-`, size - 1, size - 1);
    await expectRange(batch.output_file_id!, outBody, `bytes=0-${size + 1000}`, 0, size - 1);
  });

  test("a range spanning two parts, one spanning all, and the bytes right at each boundary", async () => {
    for (const [id, body] of [
      [batch.output_file_id!, outBody],
      [batch.error_file_id!, errBody],
    ] as const) {
      const { starts, size } = await boundaries(id);
      expect(size).toBe(body.length);
      for (const b of starts.slice(1)) {
        await expectRange(id, body, `bytes=${b - 10}-${b + 9}`, b - 10, b + 9);
        await expectRange(id, body, `bytes=${b - 1}-${b}`, b - 1, b);
        // A range that ends at a part's last byte, and one that starts at a part's first.
        await expectRange(id, body, `bytes=${b - 5}-${b - 1}`, b - 5, b - 1);
        await expectRange(id, body, `bytes=${b}-${b + 4}`, b, b + 4);
      }
      await expectRange(id, body, `bytes=1-${size - 2}`, 1, size - 2);
    }
  });

  test("suffix ranges (bytes=-N) inside the last part and reaching back over several", async () => {
    const { starts, size } = await boundaries(batch.output_file_id!);
    await expectRange(batch.output_file_id!, outBody, "bytes=-1", size - 1, size - 1);
    await expectRange(batch.output_file_id!, outBody, "bytes=-100", size - 100, size - 1);
    const back = size - starts[starts.length - 3]! + 7; // starts 7 bytes before the third-last part
    await expectRange(batch.output_file_id!, outBody, `bytes=-${back}`, size - back, size - 1);
    await expectRange(batch.output_file_id!, outBody, `bytes=-${size + 50}`, 0, size - 1);
  });

  test("open ranges (bytes=N-) from inside a middle part to the end", async () => {
    const { starts, size } = await boundaries(batch.output_file_id!);
    const from = starts[2]! - 3;
    await expectRange(batch.output_file_id!, outBody, `bytes=${from}-`, from, size - 1);
  });

  test("unsatisfiable → 416 with content-range: bytes */size", async () => {
    const size = outBody.length;
    for (const range of [`bytes=${size}-`, `bytes=${size + 10}-${size + 20}`, "bytes=-0"]) {
      const res = await get(batch.output_file_id!, range);
      expect(res.status).toBe(416);
      expect(res.headers.get("content-range")).toBe(`bytes */${size}`);
      expect(((await res.json()) as { error?: unknown }).error).toBeDefined();
    }
  });
});

describe("leftovers and deletion", () => {
  const trashEmpty = () => readdirSync(join(t.dataDir, "trash")).length === 0;

  test("after the batch ends: no working directory, nothing in tmp, the trash empties", async () => {
    expect(existsSync(join(t.dataDir, "batches", batch.id))).toBe(false);
    expect(readdirSync(join(t.dataDir, "tmp"))).toEqual([]);
    await trashIn(t.dataDir).settled();
    expect(trashEmpty()).toBe(true);
  });

  test("DELETE of a composed file removes every part (off the request path) and the part rows", async () => {
    const id = batch.output_file_id!;
    expect((await storedParts(id)).length).toBeGreaterThan(1);
    const res = await t.api(`/files/${id}`, { method: "DELETE" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id, object: "file", deleted: true });
    // Renamed away at once; removed in the background (on S3: deleted in the background).
    if (!t.storage) expect(existsSync(partsDir(id))).toBe(false);
    expect(await storedParts(id)).toEqual([]);
    expect(await partsOf(id)).toEqual([]);
    expect((await t.api(`/files/${id}/content`)).status).toBe(404);
    await trashIn(t.dataDir).settled();
    expect(trashEmpty()).toBe(true);
  });

  test("an expired composed file loses its parts in the sweep", async () => {
    const id = batch.error_file_id!;
    expect((await storedParts(id)).length).toBeGreaterThan(0);
    const { files } = t.server.ctx.db.t;
    await t.server.ctx.db.update(files).set({ expiresAt: 1 }).where(eq(files.id, id));
    expect(await sweepExpiredFiles(t.server.ctx)).toBeGreaterThanOrEqual(1);
    expect(await storedParts(id)).toEqual([]);
    expect(await partsOf(id)).toEqual([]);
    await trashIn(t.dataDir).settled();
    expect(trashEmpty()).toBe(true);
  });

  test("the leftovers sweep removes working directories of batches that no longer run (unknown, or final)", async () => {
    const { mkdirSync, writeFileSync } = await import("node:fs");
    const stale = join(t.dataDir, "batches", "batch_gone00000000000000000000");
    mkdirSync(stale, { recursive: true });
    writeFileSync(join(stale, "out-0.jsonl"), "");
    const done = join(t.dataDir, "batches", batch.id);
    mkdirSync(done, { recursive: true });
    expect(await sweepBatchLeftovers(t.server.ctx)).toBe(2);
    expect(existsSync(stale)).toBe(false);
    expect(existsSync(done)).toBe(false);
  });
});

describe("offpeak_event_loop_delay_seconds", () => {
  const scrape = async () => (await t.api("/metrics")).text();
  const sample = (text: string, series: string) => {
    const m = new RegExp(`^${series.replace(/[{}"+.]/g, (c) => "\\" + c)} (\\S+)$`, "m").exec(text);
    return m ? Number(m[1]) : NaN;
  };

  test("is a histogram that counts the 10 ms ticks, and a block of the main thread shows in it", async () => {
    const before = await scrape();
    expect(before).toContain("# TYPE offpeak_event_loop_delay_seconds histogram");
    expect(before).toContain("# TYPE offpeak_event_loop_delay_max_seconds gauge");
    const count0 = sample(before, "offpeak_event_loop_delay_seconds_count");
    const over0 = count0 - sample(before, 'offpeak_event_loop_delay_seconds_bucket{le="0.1"}');
    // The server runs in this process: holding this thread holds its event loop.
    const s = performance.now();
    while (performance.now() - s < 150);
    const after = await pollUntil(
      scrape,
      (text) => sample(text, "offpeak_event_loop_delay_seconds_count") - sample(text, 'offpeak_event_loop_delay_seconds_bucket{le="0.1"}') > over0,
      5000,
      20,
      "the blocked tick to be observed",
    );
    expect(sample(after, "offpeak_event_loop_delay_seconds_count")).toBeGreaterThan(count0);
    expect(sample(after, "offpeak_event_loop_delay_max_seconds")).toBeGreaterThan(0.1);
  });
});

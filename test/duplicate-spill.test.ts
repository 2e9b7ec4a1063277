// The custom_id duplicate check with bounded memory (src/jsonl/duplicateFinder.ts):
// past its memory bound it spills fingerprints to partition files and checks
// them after the last id. With a tiny bound (forcing the spill and, for large
// partitions, several passes over one file), it must find exactly what the
// in-memory check finds: the same suspects, in line order, and the first real
// duplicate's line, also across partitions and across the spill point.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DuplicateFinder, IdBatcher, MAX_SUSPECTS, type DuplicateReport } from "../src/jsonl/duplicateFinder";
import { firstConfirmedDuplicate } from "../src/jsonl/duplicates";
import { DuplicateConfirmer } from "../src/jsonl/confirm";
import { chatLine, startTestServer, uploadRaw, type TestServer } from "./helpers/server";
import { rng } from "./helpers/random";

const enc = new TextEncoder();
/** The smallest bound: 1024 slots, 716 ids in memory, then the spill. */
const TINY = 8192;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "offpeak-spill-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs ids (line k+1 = ids[k]; null = a line without a request) through a finder, as the upload's Workers do (in batches). */
function check(ids: (string | null)[], finder: DuplicateFinder): DuplicateReport {
  const batcher = new IdBatcher();
  ids.forEach((id, k) => {
    if (id === null) return;
    const b = enc.encode(id);
    batcher.add(k + 1, b, 0, b.length);
    if (k % 997 === 0) {
      const batch = batcher.take();
      if (batch) {
        finder.addBatch(batch);
        batcher.recycle(batch);
      }
    }
  });
  const last = batcher.take();
  if (last) finder.addBatch(last);
  return finder.report();
}

const inMemory = (ids: (string | null)[]) => check(ids, new DuplicateFinder());
let runs = 0;
const spilled = (ids: (string | null)[], memoryBytes = TINY) => check(ids, new DuplicateFinder({ memoryBytes, spillPath: join(dir, `t${runs++}`) }));
const linesOf = (r: DuplicateReport) => r.suspects.map((s) => s.line);


describe("DuplicateFinder with a spill", () => {
  test("unique ids: no suspect; the spill happened and its files are gone", () => {
    const ids = Array.from({ length: 50_000 }, (_, i) => `req-${i}`);
    const r = spilled(ids);
    expect(r.suspects).toEqual([]);
    expect(r.tooManyAt).toBeNull();
    expect(r.spilled).toBeGreaterThan(49_000);
    expect(readdirSync(dir)).toEqual([]);
  });

  test("a repeat of an id from before the spill, found after it, at the exact line", () => {
    const ids = Array.from({ length: 20_000 }, (_, i) => `req-${i}`);
    ids[14_999] = "req-2"; // line 15000 repeats line 3 (in memory when the spill began)
    const r = spilled(ids);
    expect(r.spilled).toBeGreaterThan(0);
    expect(linesOf(r)).toEqual([15_000]);
  });

  test("repeats in several partitions come out in line order; one before the spill stays first", () => {
    const ids = Array.from({ length: 30_000 }, (_, i) => `id-${i}`);
    ids[500] = "id-7"; // line 501, in memory
    ids[29_000] = "id-20000"; // after the spill, both occurrences spilled
    ids[12_000] = "id-11000";
    ids[25_000] = "id-3";
    const r = spilled(ids);
    expect(linesOf(r)).toEqual([501, 12_001, 25_001, 29_001]);
    expect(linesOf(r)).toEqual(linesOf(inMemory(ids)));
  });

  test("random files with random repeats: the same suspects and stop line as the in-memory check (also over several passes per partition)", () => {
    for (let trial = 0; trial < 12; trial++) {
      const next = rng(trial + 1);
      const n = trial < 4 ? 5_000 : trial < 10 ? 60_000 : 200_000; // 200K: ≈3K a partition, over 716 per pass
      const ids: (string | null)[] = Array.from({ length: n }, (_, i) => `c${trial}-${i}-${Math.floor(next() * 1e9)}`);
      const repeats = trial % 4 === 3 ? 150 : Math.floor(next() * 20); // some past MAX_SUSPECTS
      for (let k = 0; k < repeats; k++) {
        const from = Math.floor(next() * n);
        const to = Math.floor(next() * n);
        ids[Math.max(from, to)] = ids[Math.min(from, to)]!;
      }
      for (let k = 0; k < 10; k++) ids[Math.floor(next() * n)] = null; // blank or bad lines: no id
      const want = inMemory(ids);
      const got = spilled(ids);
      expect({ trial, lines: linesOf(got), tooManyAt: got.tooManyAt }).toEqual({ trial, lines: linesOf(want), tooManyAt: want.tooManyAt });
      expect(got.suspects).toEqual(want.suspects);
    }
    expect(readdirSync(dir)).toEqual([]);
  });

  test("one id repeated everywhere after the spill: the first MAX_SUSPECTS lines, and checking stops at the last of them", () => {
    const ids = Array.from({ length: 10_000 }, (_, i) => (i < 2_000 ? `u-${i}` : "same"));
    const r = spilled(ids);
    expect(linesOf(r)).toEqual(Array.from({ length: MAX_SUSPECTS }, (_, k) => 2_002 + k));
    expect(r.tooManyAt).toBe(2_001 + MAX_SUSPECTS);
  });

  test("the default bound (4 MiB) keeps 360K ids in memory and spills 400K", () => {
    const ids = Array.from({ length: 400_000 }, (_, i) => `r${i}`);
    ids[399_999] = "r1";
    expect(check(ids.slice(0, 360_000), new DuplicateFinder({ spillPath: join(dir, "default") })).spilled).toBe(0);
    const r = check(ids, new DuplicateFinder({ spillPath: join(dir, "default") }));
    expect(r.spilled).toBeGreaterThan(0);
    expect(linesOf(r)).toEqual([400_000]);
  });

  test("confirmation by fingerprint: a real repeat is named; a fingerprint that only collides is not", async () => {
    const file = [chatLine("a"), chatLine("b"), "", chatLine("c"), chatLine("b"), chatLine("a")].join("\n") + "\n";
    const stream = () => new Blob([file]).stream();
    const ids = file.split("\n").map((l) => (l ? (JSON.parse(l).custom_id as string) : null));
    const r = inMemory(ids);
    expect(linesOf(r)).toEqual([5, 6]);
    expect(await firstConfirmedDuplicate(stream(), r.suspects)).toEqual({ line: 5, customId: "b" });
    // A suspect whose fingerprint is nobody's (as a collision's would be, once the other id is not there): nothing confirmed.
    expect(await firstConfirmedDuplicate(stream(), [{ line: 4, hi: 12345, lo: 67890 }])).toBeNull();
  });
});

describe("DuplicateConfirmer (the exact pass, fed the stored bytes in chunks of any size)", () => {
  test("BOM, CRLF, blank lines, an escaped id (the JSON.parse path) and chunks cut anywhere: the same answer", () => {
    const lines = [
      chatLine("a"),
      "",
      String.raw`{"custom_id":"dup-\u0078","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
      chatLine("é-ü"),
      chatLine("b"),
      chatLine("dup-x"), // line 6: the escaped id of line 3, spelled plainly
      chatLine("é-ü"), // line 7
    ];
    const file = enc.encode("\ufeff" + lines.join("\r\n") + "\r\n");
    const ids = lines.map((l) => (l ? (JSON.parse(l).custom_id as string) : null));
    const { suspects } = inMemory(ids);
    expect(suspects.map((s) => s.line)).toEqual([6, 7]);
    for (const size of [1, 2, 3, 7, 64, file.length]) {
      const c = new DuplicateConfirmer(suspects);
      for (let i = 0; i < file.length && !c.done; i += size) c.push(file.subarray(i, i + size));
      c.end();
      expect({ size, result: c.result }).toEqual({ size, result: { line: 6, customId: "dup-x" } });
    }
    // Without a final newline, the last line still counts.
    const c = new DuplicateConfirmer(suspects.slice(1));
    c.push(enc.encode([chatLine("é-ü"), chatLine("q"), chatLine("r"), chatLine("s"), chatLine("t"), chatLine("u"), chatLine("é-ü")].join("\n")));
    c.end();
    expect(c.result).toEqual({ line: 7, customId: "é-ü" });
  });
});

describe("uploads with a small duplicate-check bound (OFFPEAK_DUPLICATE_CHECK_BYTES=8192: the spill path)", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ env: { OFFPEAK_DUPLICATE_CHECK_BYTES: String(TINY), OFFPEAK_BATCH_WORKERS: "1" } });
  });
  afterAll(() => t?.stop());
  const tmpLeft = () => readdirSync(join(t.dataDir, "tmp"));
  const body = (ids: string[]) => ids.map((id) => chatLine(id)).join("\n") + "\n";
  const pollTmp = async (ok: () => boolean) => {
    for (let i = 0; i < 100 && !ok(); i++) await Bun.sleep(50);
    expect(ok()).toBe(true);
  };

  test("30,000 unique ids: accepted, every line counted, no spill file left", async () => {
    const ids = Array.from({ length: 30_000 }, (_, i) => `u-${i}`);
    const res = await uploadRaw(t, body(ids));
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "processed" });
    expect(tmpLeft()).toEqual([]);
  });

  test("the first duplicate is named at its exact line, across the spill and across partitions", async () => {
    const ids = Array.from({ length: 30_000 }, (_, i) => `u-${i}`);
    ids[27_000] = "u-20000"; // line 27001: both occurrences spilled
    ids[22_000] = "u-5"; // line 22001 repeats line 6, from before the spill: the first duplicate
    const res = await uploadRaw(t, body(ids));
    expect(res.status).toBe(400);
    const err = ((await res.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe("duplicate_custom_id");
    expect(err.message).toContain("line 22001");
    expect(err.message).toContain("'u-5'");
    expect(tmpLeft()).toEqual([]);
  });

  test("an upload cut off mid-stream, after the spill began, leaves no spill file", async () => {
    // The body streams slowly: ≈12,000 lines (past the 716 kept in memory, and
    // enough to fill some partition buffers), then nothing until a spill file
    // shows up in <dataDir>/tmp; then the client goes away.
    const B = "----spillboundary";
    const head = enc.encode(`--${B}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${B}\r\nContent-Disposition: form-data; name="file"; filename="x.jsonl"\r\n\r\n`);
    const ids = Array.from({ length: 120_000 }, (_, i) => `u-${i}`);
    const chunks = [head, enc.encode(body(ids))];
    const ac = new AbortController();
    let sawSpill = false;
    const stream = new ReadableStream<Uint8Array>({
      async pull(c) {
        const next = chunks.shift();
        if (next) return c.enqueue(next);
        for (let i = 0; i < 200 && !sawSpill; i++) {
          sawSpill = tmpLeft().some((f) => f.startsWith("dupcheck-"));
          await Bun.sleep(10);
        }
        ac.abort();
        c.error(new Error("client gone"));
      },
    });
    await t
      .api("/files", { method: "POST", body: stream, headers: { "content-type": `multipart/form-data; boundary=${B}` }, signal: ac.signal, duplex: "half" } as RequestInit)
      .then(
        (r) => r.arrayBuffer(),
        () => null,
      );
    expect(sawSpill).toBe(true);
    // The server notices the cut-off connection and abandons the validation (spill files removed then, and again a second later).
    await pollTmp(() => !tmpLeft().some((f) => f.startsWith("dupcheck-")));
  });
});

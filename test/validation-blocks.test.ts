// An upload validated by several scanner Workers (docs/CONTRACT.md §20): the file is cut
// into blocks at line ends (src/jsonl/lineBlocks.ts), each block checked on
// its own with lines numbered from 1, and the blocks put back in the file's
// order (src/jsonl/sequencer.ts). Whatever the cut and whatever order the
// scanners finish in, the verdict must be the one validator reading the
// whole file gives: the same first bad line with the same message, the same
// request limit, the same duplicate suspects (also a repeat whose first
// occurrence is in another block), the same count.
import { describe, expect, test } from "bun:test";
import { BatchFileValidator, MAX_LINE_BYTES, renumbered, type ValidationResult } from "../src/jsonl/batchFileValidator";
import { DuplicateFinder, IdBatcher } from "../src/jsonl/duplicateFinder";
import { LineBlocks } from "../src/jsonl/lineBlocks";
import { BlockSequencer, type ScannedBlock } from "../src/jsonl/sequencer";
import { ValidatorClient, validatorWorkers } from "../src/jsonl/validatorClient";
import { rng } from "./helpers/random";

const enc = new TextEncoder();


const line = (id: string, extra = "") => `{"custom_id":${JSON.stringify(id)},"method":"POST","url":"/v1/chat/completions","body":{"model":"m"${extra}}}`;

/** One of every kind of bad line the validator words, each message starting "line N". */
const BAD: (string | Uint8Array)[] = [
  '{"custom_id":"x",}',
  "[1,2]",
  '"just a string"',
  '{"method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}',
  '{"custom_id":"","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}',
  '{"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{"model":"m"}}',
  '{"custom_id":"x","method":"POST","url":"/v1/nope","body":{"model":"m"}}',
  '{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":[]}',
  '{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{}}',
  new Uint8Array([...enc.encode('{"custom_id":"'), 0xff, ...enc.encode('","method":"POST"}')]),
  new Uint8Array([0xc3, 0x28]),
];

/** A random batch file: good lines (some ids repeated, some escaped, some long), blank lines, CRLF, maybe a BOM, maybe bad lines, maybe no final newline. */
function randomFile(r: () => number, lines: number, badRate: number, dupRate: number): Uint8Array {
  const parts: Uint8Array[] = [];
  if (r() < 0.3) parts.push(new Uint8Array([0xef, 0xbb, 0xbf]));
  const ids: string[] = [];
  for (let i = 0; i < lines; i++) {
    const x = r();
    let text: string | Uint8Array;
    if (x < badRate) text = BAD[Math.floor(r() * BAD.length)]!;
    else if (x < badRate + 0.05) text = r() < 0.5 ? "" : "  \t";
    else {
      let id = ids.length > 0 && r() < dupRate ? ids[Math.floor(r() * ids.length)]! : `id-${i}-${Math.floor(r() * 1e6)}`;
      ids.push(id);
      // Escaped ids and odd spacing take the JSON.parse path; a long body makes lines longer than small blocks.
      const kind = r();
      if (kind < 0.1) text = line(id).replace('"custom_id"', ' "custom_id" ');
      else if (kind < 0.2) text = `{"custom_id":"${[...id].map((c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")).join("")}","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`;
      else if (kind < 0.3) text = line(id, `,"pad":"${"x".repeat(Math.floor(r() * 3000))}"`);
      else text = line(id);
    }
    parts.push(typeof text === "string" ? enc.encode(text) : text);
    if (i < lines - 1 || r() < 0.7) parts.push(enc.encode(r() < 0.2 ? "\r\n" : "\n"));
  }
  return Buffer.concat(parts);
}

/** The whole file through one validator, as it was read before blocks. */
function whole(file: Uint8Array, maxRequests: number): ValidationResult {
  const v = new BatchFileValidator(maxRequests);
  v.push(file);
  return v.finish();
}

/** The file cut into blocks of `blockBytes`, fed in chunks of random sizes; each block scanned alone; the summaries handed over in a random order. */
function inBlocks(file: Uint8Array, maxRequests: number, blockBytes: number, r: () => number): { result: ValidationResult; blocks: number } {
  const scanned: ScannedBlock[] = [];
  const batcher = new IdBatcher();
  const validator = new BatchFileValidator(Infinity, batcher);
  const cutter = new LineBlocks(blockBytes, (block, length) => {
    const seq = scanned.length;
    validator.startBlock(seq === 0);
    validator.push(block.subarray(0, length));
    scanned.push({ seq, ...validator.endBlock(), ids: batcher.take() });
  });
  for (let i = 0; i < file.length; ) {
    const n = 1 + Math.floor(r() * blockBytes * 3);
    cutter.write(file.subarray(i, i + n));
    i += n;
  }
  cutter.end();
  for (let i = scanned.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [scanned[i], scanned[j]] = [scanned[j]!, scanned[i]!];
  }
  const seq = new BlockSequencer(maxRequests, new DuplicateFinder());
  for (const b of scanned) seq.add(b);
  seq.end(scanned.length);
  return { result: seq.result(), blocks: scanned.length };
}

const verdict = (r: ValidationResult) => ({ error: r.error, suspects: r.suspects, requests: r.error ? undefined : r.requests });

describe("validation in blocks (several scanners) gives the whole file's verdict", () => {
  test("random files, cuts, chunk sizes and orders: the same first error (line and message), suspects and count", () => {
    const r = rng(20261126);
    let errors = 0;
    let withSuspects = 0;
    let limited = 0;
    let manyBlocks = 0;
    for (let run = 0; run < 400; run++) {
      const file = randomFile(r, 1 + Math.floor(r() * 120), r() < 0.5 ? 0 : r() * 0.05, r() < 0.5 ? 0 : 0.05);
      const maxRequests = r() < 0.2 ? 1 + Math.floor(r() * 60) : 1_000_000;
      const blockBytes = [64, 100, 256, 1024, 4096][Math.floor(r() * 5)]!;
      const expected = whole(file, maxRequests);
      const got = inBlocks(file, maxRequests, blockBytes, r);
      expect(verdict(got.result)).toEqual(verdict(expected));
      if (expected.error) errors++;
      if (expected.error?.message.includes("more than")) limited++;
      if (expected.suspects.length > 0) withSuspects++;
      if (got.blocks > 3) manyBlocks++;
    }
    // The cases that matter came up.
    expect(errors).toBeGreaterThan(100);
    expect(limited).toBeGreaterThan(10);
    expect(withSuspects).toBeGreaterThan(20);
    expect(manyBlocks).toBeGreaterThan(200);
  });

  test("a repeat whose first occurrence is blocks earlier is the suspect at its own line", () => {
    const lines = Array.from({ length: 200 }, (_, i) => line(i === 150 ? "id-3" : `id-${i}`));
    const file = enc.encode(lines.join("\n") + "\n");
    const { result, blocks } = inBlocks(file, 1000, 256, rng(1));
    expect(blocks).toBeGreaterThan(50);
    expect(result.error).toBeNull();
    expect(result.suspects.map((s) => s.line)).toEqual([151]);
    expect(result.requests).toBe(200);
  });

  test("each kind of bad line is renumbered to its line in the file", () => {
    for (const bad of BAD) {
      const good = Array.from({ length: 40 }, (_, i) => line(`g${i}`)).join("\n") + "\n";
      const file = Buffer.concat([enc.encode(good), typeof bad === "string" ? enc.encode(bad) : bad, enc.encode("\n")]);
      const expected = whole(file, 1000).error!;
      expect(expected.line).toBe(41);
      expect(inBlocks(file, 1000, 128, rng(2)).result.error).toEqual(expected);
    }
    expect(() => renumbered({ line: 2, code: "invalid_file", param: null, message: "the file contains no requests" }, 10)).toThrow();
  });

  test("a line longer than the limit, and one just under it, across many small blocks", () => {
    const long = `{"custom_id":"L","method":"POST","url":"/v1/chat/completions","body":{"model":"m","p":"${"x".repeat(MAX_LINE_BYTES)}"}}`;
    const ok = `{"custom_id":"L","method":"POST","url":"/v1/chat/completions","body":{"model":"m","p":"${"x".repeat(MAX_LINE_BYTES - 200)}"}}`;
    for (const [middle, ending] of [[long, "\n"], [ok, "\r\n"], [long, ""]] as const) {
      const file = enc.encode(`${line("a")}\n${middle}${ending}${ending ? line("b") + "\n" : ""}`);
      expect(verdict(inBlocks(file, 1000, 1 << 16, rng(3)).result)).toEqual(verdict(whole(file, 1000)));
    }
  });

  test("no requests: the file's last line is named, after every block", () => {
    const file = enc.encode("\n\n  \n\r\n\n".repeat(50));
    const expected = whole(file, 10).error;
    expect(expected?.message).toBe("the file contains no requests");
    expect(inBlocks(file, 10, 64, rng(4)).result.error).toEqual(expected);
  });
});

describe("ValidatorClient with several scanner Workers", () => {
  test("the blocks go to every scanner, and the verdict is the whole file's", async () => {
    const r = rng(7);
    for (let run = 0; run < 6; run++) {
      const file = randomFile(r, 3000, run % 2 === 0 ? 0 : 0.0005, run % 3 === 0 ? 0.001 : 0);
      const v = new ValidatorClient(1_000_000, { scanners: 3, blockBytes: 4096 });
      // One scanner and the finder to start with; the others join when it falls behind.
      expect(validatorWorkers().busy).toBe(2);
      for (let i = 0; i < file.length; i += 7000) await v.write(file.subarray(i, i + 7000));
      const failedEarly = v.failed;
      const result = await v.finish();
      const expected = whole(file, 1_000_000);
      expect(verdict(result)).toEqual(verdict(expected));
      // Every scanner took part (a clean file is read to its end: written at once, the first falls behind).
      if (!failedEarly) {
        expect(v.blocksPerScanner.length).toBe(3);
        expect(v.blocksPerScanner.every((n) => n > 0)).toBe(true);
      }
      expect(validatorWorkers().busy).toBe(0);
    }
  });

  test("a small upload, or one that stalls, holds one scanner and the finder", async () => {
    const v = new ValidatorClient(1000, { scanners: 4, blockBytes: 4096 });
    const small = enc.encode(Array.from({ length: 20 }, (_, i) => line(`s${i}`)).join("\n") + "\n");
    await v.write(small);
    await Bun.sleep(20);
    expect(validatorWorkers().busy).toBe(2);
    expect((await v.finish()).requests).toBe(20);
    expect(v.blocksPerScanner).toEqual([1]);
    expect(validatorWorkers().busy).toBe(0);
  });

  test("a bad line stops sending: the blocks after it are not read", async () => {
    const good = Array.from({ length: 2000 }, (_, i) => line(`g${i}`)).join("\n") + "\n";
    const file = enc.encode(good + "[1]\n" + good.replaceAll('"g', '"h'));
    const v = new ValidatorClient(1_000_000, { scanners: 2, blockBytes: 4096 });
    // Written to the end, as an upload whose purpose is not known yet is.
    for (let i = 0; i < file.length; i += 4096) {
      await v.write(file.subarray(i, i + 4096));
      await Bun.sleep(1);
    }
    const result = await v.finish();
    expect(result.error?.message).toMatch(/^line 2001 is not a JSON object/);
    const sent = v.blocksPerScanner.reduce((a, b) => a + b, 0);
    expect(sent).toBeLessThan(Math.ceil(file.length / 4096) - 10);
  });

  test("a BOM is skipped only at the file's start, not at the start of a later block", async () => {
    // Lines of exactly 128 bytes: a 4096-byte block ends after line 32, and line 33 starts the next one.
    const exact = (id: string, bytes: number) => {
      const base = line(id, ',"p":""');
      return line(id, `,"p":"${"x".repeat(bytes - 1 - base.length)}"`) + "\n";
    };
    const BOM = new Uint8Array([0xef, 0xbb, 0xbf]);
    const parts = Array.from({ length: 64 }, (_, i) => (i === 0 || i === 32 ? [BOM, enc.encode(exact(`b${i}`, 125))] : [enc.encode(exact(`b${i}`, 128))])).flat();
    const file = Buffer.concat(parts);
    expect(file.length).toBe(64 * 128);
    const expected = whole(file, 1000);
    expect(expected.error?.line).toBe(33);
    const v = new ValidatorClient(1000, { scanners: 2, blockBytes: 4096 });
    await v.write(file);
    expect(verdict(await v.finish())).toEqual(verdict(expected));
  });
});

// The byte-level line scanner may only ever say "certainly valid" when the
// exact JSON.parse path agrees, and must name the same custom_id. A seeded
// fuzzer mutates valid request lines (bytes flipped, inserted, deleted,
// duplicated keys, escapes, odd UTF-8) and compares the two verdicts.
import { describe, expect, test } from "bun:test";
import { kindOfUrl } from "../src/endpoints";
import { scanRequestLine } from "../src/jsonl/lineScan";

const enc = new TextEncoder();
const strict = new TextDecoder("utf-8", { fatal: true });

/** The reference: what the JSON.parse path accepts, and the custom_id it reads. */
function reference(bytes: Uint8Array): string | null {
  let value: any;
  try {
    value = JSON.parse(strict.decode(bytes));
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  if (typeof value.custom_id !== "string" || value.custom_id === "") return null;
  if (value.method !== "POST" || typeof value.url !== "string" || kindOfUrl(value.url) === undefined) return null;
  const body = value.body;
  if (typeof body !== "object" || body === null || Array.isArray(body)) return null;
  if (typeof body.model !== "string" || body.model === "") return null;
  return value.custom_id;
}

function fast(bytes: Uint8Array): string | null {
  const out = { idStart: 0, idEnd: 0 };
  if (!scanRequestLine(bytes, 0, bytes.length, out)) return null;
  return strict.decode(bytes.subarray(out.idStart, out.idEnd));
}

const SEEDS = [
  `{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"héllo 😀 \\"q\\" \\u00e9"}],"max_tokens":16,"temperature":0.5e-3,"stop":null,"logprobs":false,"n":1}}`,
  ` { "body" : { "input" : [ 1 , 2 , -3.25E+2 ] , "model" : "offpeak-embed" } , "url" : "/api/v1/embeddings" , "method" : "POST" , "custom_id" : "日本語-id" , "extra" : { } } `,
  `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"x","input":"t","nested":{"a":[[],[{}],{"b":[true,false,null]}]}}}`,
];

describe("scanRequestLine", () => {
  test("accepts ordinary request lines and finds their custom_id", () => {
    for (const s of SEEDS) {
      const b = enc.encode(s);
      expect(fast(b)).toBe(reference(b));
      expect(fast(b)).not.toBeNull();
    }
  });

  test("never accepts what the JSON.parse path rejects, never misreads the custom_id (seeded fuzz)", () => {
    let seed = 12345;
    const rnd = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const pieces = ['"', "\\", "{", "}", "[", "]", ",", ":", " ", "\\u12", "\\u00e9", "-", "0", "01", "1e", ".5", "tru", "null", "\u00e9", "😀", '"custom_id":"z"', '"model":"y"', '"method":"GET"', '"url":"/v1/x"', "\x01", "\r", "\t"];
    const rawBytes = [0x80, 0xc0, 0xc2, 0xe0, 0xed, 0xa0, 0xf4, 0x90, 0xff, 0xf0, 0x9f];
    let disagreements = 0;
    let accepted = 0;
    const examples: string[] = [];
    for (let round = 0; round < 40_000; round++) {
      let b = enc.encode(SEEDS[round % SEEDS.length]!);
      const edits = 1 + Math.floor(rnd() * 3);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(rnd() * (b.length + 1));
        const kind = rnd();
        let insert: Uint8Array;
        if (kind < 0.4) insert = enc.encode(pieces[Math.floor(rnd() * pieces.length)]!);
        else if (kind < 0.55) insert = Uint8Array.of(rawBytes[Math.floor(rnd() * rawBytes.length)]!);
        else insert = new Uint8Array(0);
        const del = kind >= 0.4 && kind < 0.55 ? 0 : Math.floor(rnd() * 3);
        const next = new Uint8Array(b.length - Math.min(del, b.length - at) + insert.length);
        next.set(b.subarray(0, at), 0);
        next.set(insert, at);
        next.set(b.subarray(Math.min(b.length, at + del)), at + insert.length);
        b = next;
      }
      const f = fast(b);
      const r = reference(b);
      if (f !== null) accepted++;
      // The scanner may decline a valid line (r !== null, f === null), never the reverse.
      if (f !== null && f !== r) {
        disagreements++;
        if (examples.length < 5) examples.push(Buffer.from(b).toString("latin1"));
      }
    }
    expect(examples).toEqual([]);
    expect(disagreements).toBe(0);
    // The fuzz must exercise the accepting side too, or it proves nothing.
    expect(accepted).toBeGreaterThan(1000);
  });

  test("declines lines that need JSON.parse to decide: repeated keys, escaped keys or values, deep nesting", () => {
    const cases = [
      `{"custom_id":"a","custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`,
      `{"custom_\\u0069d":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`,
      `{"custom_id":"a\\u0062","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`,
      `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m","model":"n"}}`,
      `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m","x":${"[".repeat(100)}${"]".repeat(100)}}}`,
    ];
    for (const c of cases) expect(fast(enc.encode(c))).toBeNull();
  });
});

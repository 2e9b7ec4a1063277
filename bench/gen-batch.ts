// Generates a realistic chat batch input file (docs/CONTRACT.md §4/§5): N lines of
// {"custom_id","method":"POST","url":"/v1/chat/completions","body":{model,
// messages:[system,user],max_tokens}}, ≈280 bytes a line, so 1,000,000 lines
// ≈ 280 MB. Deterministic (seeded PRNG: same N → same bytes), streamed in
// ~1 MB blocks (bounded memory), written to `<path>.tmp` and renamed, with a
// `<path>.meta.json` marker recording the line count and size; a later call
// reuses the file when the marker matches, unless forced.
//
// With --kind responses (or completions) the same requests, from the same
// seed, go to /v1/responses ({model, instructions, input, max_output_tokens})
// or /v1/completions ({model, prompt, max_tokens}): the same texts, so the
// endpoints' batches can be compared.
//
// Usage: bun bench/gen-batch.ts [--lines N] [--out PATH] [--kind chat|responses|completions] [--force]
// Library: generateBatchFile(path, lines?, { force?, kind? })
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { dirname, resolve } from "node:path";

export const DEFAULT_LINES = 1_000_000;
export const DEFAULT_PATH = "bench/data/batch-1m.jsonl";
/** Bump when the output format changes, so stale files are regenerated. */
const GENERATOR_VERSION = 1;
const SEED = 0x0ff9ea4;

export interface GeneratedFile {
  path: string;
  lines: number;
  bytes: number;
  /** False when an existing file with a matching marker was reused. */
  generated: boolean;
  seconds: number;
}

export type LineKind = "chat" | "responses" | "completions";

interface Marker {
  version: number;
  seed: number;
  lines: number;
  bytes: number;
  /** Absent in markers written before kinds existed: chat. */
  kind?: LineKind;
}

const SYSTEM_PROMPTS = [
  "You are a helpful assistant.",
  "Answer in at most two sentences.",
  "You are a polite support agent.",
  "Classify the sentiment.",
  "You are an expert translator.",
];

const OPENERS = [
  "Summarize the following review",
  "Classify the sentiment of this message",
  "Translate into French",
  "Extract the product and price",
  "Write a short reply to this customer",
  "Explain in simple words",
  "List three key points from",
  "Rewrite more formally",
];

const WORDS = (
  "the a delivery arrived late but the package was intact and the product works well " +
  "battery life screen quality customer service refund order invoice shipping price " +
  "discount warranty support replacement size color fabric comfortable broken cheap " +
  "expensive recommend again never always quickly slowly today yesterday week month " +
  "café naïve déjà-vu straße 東京 data model request response latency throughput " +
  "kitchen garden laptop phone headphones charger cable keyboard mouse monitor desk chair"
).split(" ");

/** mulberry32: small, fast, deterministic. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function userText(rand: () => number): string {
  const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)]!;
  // 1..8 words after a short opener: ≈30..85 characters, ≈50 on average.
  const n = 1 + Math.floor(rand() * 8);
  let s = pick(OPENERS) + ": ";
  for (let i = 0; i < n; i++) s += (i ? " " : "") + pick(WORDS);
  const r = rand();
  // A few lines carry characters that need escaping, as real prompts do.
  if (r < 0.05) s += '\n"quoted" and a\ttab';
  else if (r < 0.5) s += ".";
  else s += "?";
  return s;
}

/** One request line (without the newline). */
export function batchLine(i: number, rand: () => number, kind: LineKind = "chat"): string {
  const system = SYSTEM_PROMPTS[Math.floor(rand() * SYSTEM_PROMPTS.length)]!;
  if (kind === "responses")
    return JSON.stringify({
      custom_id: `req-${i}`,
      method: "POST",
      url: "/v1/responses",
      body: { model: "offpeak-echo", instructions: system, input: userText(rand), max_output_tokens: 64 },
    });
  if (kind === "completions")
    return JSON.stringify({ custom_id: `req-${i}`, method: "POST", url: "/v1/completions", body: { model: "offpeak-echo", prompt: `${system}\n${userText(rand)}`, max_tokens: 64 } });
  return JSON.stringify({
    custom_id: `req-${i}`,
    method: "POST",
    url: "/v1/chat/completions",
    body: {
      model: "offpeak-echo",
      messages: [
        { role: "system", content: system },
        { role: "user", content: userText(rand) },
      ],
      max_tokens: 64,
    },
  });
}

const markerPath = (path: string) => `${path}.meta.json`;

function readMarker(path: string): Marker | null {
  try {
    return JSON.parse(readFileSync(markerPath(path), "utf8")) as Marker;
  } catch {
    return null;
  }
}

/** True if `path` holds a complete file from this generator with `lines` lines. */
export function isUpToDate(path: string, lines: number, kind: LineKind = "chat"): boolean {
  const m = readMarker(path);
  if (!m || m.version !== GENERATOR_VERSION || m.seed !== SEED || m.lines !== lines || (m.kind ?? "chat") !== kind) return false;
  try {
    return statSync(path).size === m.bytes;
  } catch {
    return false;
  }
}

export async function generateBatchFile(path: string = DEFAULT_PATH, lines: number = DEFAULT_LINES, opts: { force?: boolean; kind?: LineKind } = {}): Promise<GeneratedFile> {
  if (!Number.isInteger(lines) || lines < 1) throw new Error(`lines must be a positive integer, got ${lines}`);
  const kind = opts.kind ?? "chat";
  const t0 = performance.now();
  if (!opts.force && isUpToDate(path, lines, kind)) {
    return { path, lines, bytes: statSync(path).size, generated: false, seconds: (performance.now() - t0) / 1000 };
  }
  mkdirSync(dirname(path), { recursive: true });
  rmSync(markerPath(path), { force: true });
  const tmp = `${path}.tmp`;
  const fd = openSync(tmp, "w");
  const rand = prng(SEED);
  const encoder = new TextEncoder();
  let bytes = 0;
  try {
    let block = "";
    for (let i = 1; i <= lines; i++) {
      block += batchLine(i, rand, kind) + "\n";
      if (block.length >= 1 << 20 || i === lines) {
        const buf = encoder.encode(block);
        let off = 0;
        while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
        bytes += buf.length;
        block = "";
      }
    }
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const marker: Marker = kind === "chat" ? { version: GENERATOR_VERSION, seed: SEED, lines, bytes } : { version: GENERATOR_VERSION, seed: SEED, lines, bytes, kind };
  writeFileSync(markerPath(path), JSON.stringify(marker) + "\n");
  return { path, lines, bytes, generated: true, seconds: (performance.now() - t0) / 1000 };
}

function parseArgs(argv: string[]): { lines: number; out: string; force: boolean; kind: LineKind } {
  let lines = DEFAULT_LINES;
  let out = DEFAULT_PATH;
  let force = false;
  let kind: LineKind = "chat";
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--force") force = true;
    else if (a === "--lines") lines = Number(argv[++i]);
    else if (a === "--out") out = argv[++i]!;
    else if (a === "--kind") {
      kind = argv[++i] as LineKind;
      if (!["chat", "responses", "completions"].includes(kind)) throw new Error(`--kind must be chat, responses or completions`);
    }
    else if (a === "--help" || a === "-h") {
      process.stdout.write("Usage: bun bench/gen-batch.ts [--lines N] [--out PATH] [--kind chat|responses|completions] [--force]\n");
      process.exit(0);
    } else throw new Error(`unknown argument '${a}'`);
  }
  return { lines, out, force, kind };
}

if (import.meta.main) {
  const { lines, out, force, kind } = parseArgs(process.argv.slice(2));
  const r = await generateBatchFile(out, lines, { force, kind });
  const mb = (r.bytes / 1e6).toFixed(1);
  if (r.generated) console.log(`gen-batch: wrote ${r.lines} lines, ${mb} MB to ${r.path} in ${r.seconds.toFixed(1)} s`);
  else console.log(`gen-batch: ${r.path} is up to date (${r.lines} lines, ${mb} MB); --force to regenerate`);
}

/**
 * The upload benchmarks' input: the `lines`-line chat file (generated once,
 * under bench/data), read through once so that it sits in the page cache and
 * the first round does not time the disk. Its path and size.
 */
export async function cachedBatchFile(lines: number): Promise<{ file: string; bytes: number }> {
  const file = resolve(lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`);
  await generateBatchFile(file, lines);
  for await (const _ of Bun.file(file).stream()) {
  }
  return { file, bytes: Bun.file(file).size };
}

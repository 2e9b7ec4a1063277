// offpeak-embed: feature hashing of words, word bigrams and character
// trigrams into a fixed-size vector, L2-normalised. Deterministic, so equal
// texts give equal vectors and similar texts give close ones.
import { ApiError } from "../../errors";
import { countTokens } from "./tokens";

export const EMBED_MODEL = "offpeak-embed";
export const DEFAULT_DIMENSIONS = 256;

function addFeature(v: Float32Array, feature: string, weight: number): void {
  const h = Bun.hash.murmur32v3(feature, 0x9747b28c) >>> 0;
  // One hash bit chooses the sign, so collisions cancel out on average.
  v[h % v.length]! += h & 0x80000000 ? -weight : weight;
}

function norm2(v: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += v[i]! * v[i]!;
  return Math.sqrt(sum);
}

export function embedText(text: string, dimensions: number): Float32Array {
  const v = new Float32Array(dimensions);
  const lower = text.toLowerCase();
  const words = lower.match(/[\p{L}\p{N}_]+/gu) ?? [];
  for (let i = 0; i < words.length; i++) {
    addFeature(v, "w:" + words[i], 1);
    if (i > 0) addFeature(v, "b:" + words[i - 1] + " " + words[i], 0.5);
  }
  const padded = ` ${lower} `;
  for (let i = 0; i + 3 <= padded.length; i++) addFeature(v, "c:" + padded.slice(i, i + 3), 0.25);
  let norm = norm2(v);
  // The signed features can cancel out exactly (the weights are powers of
  // two, so the sums are exact): e.g. "a c yo" at dimensions 1 gave [0], which
  // is not L2-normalised (docs/CONTRACT.md §6). Then one feature of the whole text is
  // added: a single term cannot cancel, the result stays deterministic, and
  // texts whose features do not cancel keep exactly the vectors they had.
  if (norm === 0) {
    addFeature(v, "t:" + lower, 1);
    norm = norm2(v);
  }
  for (let i = 0; i < v.length; i++) v[i]! /= norm;
  return v;
}

/** A token id: a non-negative safe integer. */
const isTokenId = (t: unknown): t is number => Number.isSafeInteger(t) && (t as number) >= 0;

/** Normalises `input` (string | string[] | number[] | number[][]) to texts; token ids become "t<id>" words. */
export function embeddingInputs(input: unknown): string[] {
  const bad = () => new ApiError("invalid_value", "input must be a non-empty string, an array of non-empty strings, or arrays of token ids (non-negative integers)", { param: "input" });
  // An empty text has no features: its vector would be all zeros, not
  // L2-normalised (docs/CONTRACT.md §6), so it is refused as the OpenAI API does.
  if (typeof input === "string") {
    if (input.length === 0) throw bad();
    return [input];
  }
  if (!Array.isArray(input) || input.length === 0 || input.length > 2048) throw bad();
  // Token ids are non-negative integers: 1.5 or -1 is not a token.
  if (input.every((x) => typeof x === "number")) {
    if (!input.every(isTokenId)) throw bad();
    return [input.map((t) => `t${t}`).join(" ")];
  }
  return input.map((x) => {
    if (typeof x === "string" && x.length > 0) return x;
    if (Array.isArray(x) && x.length > 0 && x.every(isTokenId)) return x.map((t) => `t${t}`).join(" ");
    throw bad();
  });
}

export interface EmbedPlan {
  texts: string[];
  dimensions: number;
  format: "float" | "base64";
}

/** Validates an embeddings request for offpeak-embed (before admission, so bad input costs no quota). */
export function planEmbeddings(body: Record<string, unknown>): EmbedPlan {
  const texts = embeddingInputs(body.input);
  const dims = body.dimensions ?? DEFAULT_DIMENSIONS;
  if (!Number.isInteger(dims) || (dims as number) < 1 || (dims as number) > 4096) throw new ApiError("invalid_value", "dimensions must be an integer from 1 to 4096", { param: "dimensions" });
  const format = body.encoding_format ?? "float";
  if (format !== "float" && format !== "base64") throw new ApiError("invalid_value", "encoding_format must be float or base64", { param: "encoding_format" });
  return { texts, dimensions: dims as number, format };
}

export function embeddingsResponse(body: Record<string, unknown>, plan: EmbedPlan = planEmbeddings(body)) {
  const { texts, dimensions, format } = plan;
  let promptTokens = 0;
  const data = texts.map((text, index) => {
    promptTokens += countTokens(text);
    const v = embedText(text, dimensions);
    const embedding = format === "base64" ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64") : Array.from(v);
    return { object: "embedding" as const, index, embedding };
  });
  return { object: "list" as const, data, model: EMBED_MODEL, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } };
}

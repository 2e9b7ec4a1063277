// Exact confirmation of duplicate custom_id suspects found by fingerprint
// (see batchFileValidator.ts). Runs only when there are suspects: a real
// duplicate, or a 64-bit fingerprint collision (≈3e-6 for 10M ids).
import { readLines } from "./lineReader";

export async function firstConfirmedDuplicate(
  stream: ReadableStream<Uint8Array>,
  suspects: { line: number; customId: string }[],
): Promise<{ line: number; customId: string } | null> {
  if (suspects.length === 0) return null;
  const wanted = new Set(suspects.map((s) => s.customId));
  const lastLine = Math.max(...suspects.map((s) => s.line));
  const seen = new Set<string>();
  for await (const lines of readLines(stream)) {
    for (const { n, text } of lines) {
      if (n > lastLine) return null;
      let id: unknown;
      try {
        id = (JSON.parse(text) as { custom_id?: unknown }).custom_id;
      } catch {
        continue;
      }
      if (typeof id !== "string" || !wanted.has(id)) continue;
      if (seen.has(id)) return { line: n, customId: id };
      seen.add(id);
    }
  }
  return null;
}

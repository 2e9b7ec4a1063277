// Part files are the truth about which lines of a shard are done. After a
// crash they may end in a torn (half-written) line: it is cut off, and the
// custom_ids of the complete lines are collected so they are not run again.
// Their usage is kept beside them and priced when the shard's input line is
// read again: only the input line says which model (under our id) ran it —
// the response's own model field is the upstream's name for it.
import { closeSync, existsSync, ftruncateSync, openSync } from "node:fs";
import { chatUsageOf } from "../../anthropic/message";
import { readLines } from "../../jsonl/lineReader";
import { zeroTotals, type ShardTotals } from "../types";

export interface Recovered {
  /** custom_id → the usage its response reported (null if none). */
  done: Map<string, unknown>;
  totals: ShardTotals;
}

export async function recoverParts(outPath: string, errPath: string): Promise<Recovered> {
  const done = new Map<string, unknown>();
  const totals = zeroTotals();
  for (const [path, ok] of [
    [outPath, true],
    [errPath, false],
  ] as const) {
    if (!existsSync(path)) continue;
    const file = Bun.file(path);
    const size = file.size;
    if (size === 0) continue;
    // Keep only complete lines: cut after the last newline (a torn result
    // line may be long: look back 64 KB at a time).
    const keep = await endOfLastLine(path, size);
    if (keep !== size) {
      const fd = openSync(path, "r+");
      ftruncateSync(fd, keep);
      closeSync(fd);
    }
    if (keep === 0) continue;
    for await (const lines of readLines(Bun.file(path).slice(0, keep).stream())) {
      for (const { text } of lines) {
        if (!text) continue;
        const rec = JSON.parse(text) as { custom_id: string; response: { body?: unknown } | null };
        const body = rec.response?.body as { type?: unknown; usage?: unknown } | undefined;
        // A message batch's answer is Anthropic's message (../types.ts AnswerShape): its usage back in the endpoint's terms.
        done.set(rec.custom_id, body?.type === "message" && body.usage ? chatUsageOf(body.usage) : (body?.usage ?? null));
        if (ok) totals.completed++;
        else totals.failed++;
      }
    }
  }
  return { done, totals };
}

/** The length of `path` up to and including its last newline (0 if none). */
async function endOfLastLine(path: string, size: number): Promise<number> {
  const file = Bun.file(path);
  const WINDOW = 65536;
  for (let end = size; end > 0; end -= WINDOW) {
    const start = Math.max(0, end - WINDOW);
    const bytes = new Uint8Array(await file.slice(start, end).arrayBuffer());
    const nl = bytes.lastIndexOf(10);
    if (nl !== -1) return start + nl + 1;
  }
  return 0;
}

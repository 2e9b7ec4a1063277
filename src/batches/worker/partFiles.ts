// Part files are the truth about which lines of a shard are done. After a
// crash they may end in a torn (half-written) line: it is cut off, and the
// custom_ids of the complete lines are collected so they are not run again.
// Their usage is kept beside them and priced when the shard's input line is
// read again: only the input line says which model (under our id) ran it —
// the response's own model field is the upstream's name for it.
import { closeSync, existsSync, ftruncateSync, openSync } from "node:fs";
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
    // Keep only complete lines: cut after the last newline.
    const tail = new Uint8Array(await file.slice(Math.max(0, size - 65536), size).arrayBuffer());
    let keep = size;
    if (tail[tail.length - 1] !== 10) {
      const nl = tail.lastIndexOf(10);
      keep = nl === -1 ? (size <= 65536 ? 0 : -1) : size - tail.length + nl + 1;
      if (keep === -1) throw new Error(`part file ${path} ends in a line longer than 64 KB without newline`);
      const fd = openSync(path, "r+");
      ftruncateSync(fd, keep);
      closeSync(fd);
    }
    if (keep === 0) continue;
    for await (const lines of readLines(Bun.file(path).slice(0, keep).stream())) {
      for (const { text } of lines) {
        if (!text) continue;
        const rec = JSON.parse(text) as { custom_id: string; response: { body?: unknown } | null };
        const body = rec.response?.body as { usage?: unknown } | undefined;
        done.set(rec.custom_id, body?.usage ?? null);
        if (ok) totals.completed++;
        else totals.failed++;
      }
    }
  }
  return { done, totals };
}

// A batch shard's status is written by src/batches/shardStatus.ts alone (its
// named transitions), so the states a shard goes through and the conditions
// of each (a claim takes only a pending shard, only the lease's owner ends
// or gives one back) are read in one place. Checked on the code: no other
// module updates or inserts batch_shards rows with a status.
import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const SRC = join(import.meta.dir, "../src");

function sources(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sources(p, out);
    else if (p.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** The names `text` gives the batch_shards table: itself, and aliases (`batchShards: s`, `const s = ….batchShards`). */
function tableNames(text: string): string[] {
  const names = new Set(["batchShards"]);
  for (const m of text.matchAll(/batchShards:\s*(\w+)/g)) names.add(m[1]!);
  for (const m of text.matchAll(/(?:const|let)\s+(\w+)\s*=\s*[\w.]*\.batchShards\b/g)) names.add(m[1]!);
  return [...names];
}

test("only src/batches/shardStatus.ts writes a batch shard's status", () => {
  const writers: string[] = [];
  for (const file of sources(SRC)) {
    const rel = relative(SRC, file);
    const text = readFileSync(file, "utf8");
    if (rel === "batches/shardStatus.ts" || !text.includes("batchShards")) continue;
    for (const name of tableNames(text)) {
      // An insert of rows (each has a status), or an update whose set (within the statement) names the status.
      const writes = new RegExp(`\\.(insert\\(${name}\\)|update\\(${name}\\)[\\s\\S]{0,120}?\\.set\\(\\{[^}]*\\bstatus\\s*:)`);
      if (writes.test(text)) writers.push(`${rel} (${name})`);
    }
  }
  expect(writers).toEqual([]);
});

test("the check finds a write (an update of an alias that sets the status)", () => {
  const text = 'const { batchShards: s } = db.t;\nawait db\n  .update(s)\n  .set({ status: "pending" })';
  expect(tableNames(text)).toContain("s");
  expect(/\.(insert\(s\)|update\(s\)[\s\S]{0,120}?\.set\(\{[^}]*\bstatus\s*:)/.test(text)).toBe(true);
});

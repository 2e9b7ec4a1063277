// Writes the settings tables of README.md and docs/OPERATING.md from the
// settings table (src/config/settings.ts), between their markers:
//
//   bun scripts/settings-docs.ts
//
// test/settings-docs.test.ts fails while a table differs from what this
// writes, so a setting changed in the table is changed in the docs too.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { operatingTable, readmeTable } from "../src/config/setting";
import { SETTINGS } from "../src/config/settings";

const ROOT = join(import.meta.dir, "..");

export const BEGIN = "<!-- settings table: written by `bun scripts/settings-docs.ts` from src/config/settings.ts; edit it there -->";
export const END = "<!-- end of settings table -->";

/** Each document with its settings table. */
export const DOCS = [
  { path: "README.md", table: () => readmeTable(SETTINGS) },
  { path: "docs/OPERATING.md", table: () => operatingTable(SETTINGS) },
];

/** The table between a document's markers now, or null if it has none (or not once). */
export function tableIn(text: string): string | null {
  const a = text.indexOf(BEGIN);
  const b = text.indexOf(END);
  if (a < 0 || b < a || text.indexOf(BEGIN, a + 1) >= 0) return null;
  return text.slice(a + BEGIN.length, b).trim();
}

/** The document with `table` between its markers. */
export function withTable(text: string, table: string): string {
  const a = text.indexOf(BEGIN);
  const b = text.indexOf(END);
  if (a < 0 || b < a) throw new Error("no settings table markers");
  return `${text.slice(0, a + BEGIN.length)}\n${table}\n${text.slice(b)}`;
}

if (import.meta.main) {
  for (const doc of DOCS) {
    const path = join(ROOT, doc.path);
    const text = readFileSync(path, "utf8");
    const next = withTable(text, doc.table());
    if (next !== text) writeFileSync(path, next);
    console.log(`${doc.path}: ${next === text ? "current" : "written"}`);
  }
}

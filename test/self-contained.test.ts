// The repository explains itself: what its text cites opens inside it.
// - No citation of documents that are not in the repository, nor text about
//   how the work was organised (which ticket asked for what).
// - Every "docs/CONTRACT.md §n" lands on a heading of docs/CONTRACT.md.
// - Every file path that the text names under src/, test/, docs/ or scripts/
//   exists (a name with * in it stands for a set of files and is skipped).
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

/** The repository's own text files (tracked and new), the lock file and recorded timings aside. */
function textFiles(): string[] {
  const out = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard"], { cwd: ROOT }).stdout.toString();
  return out
    .split("\n")
    .filter((f) => /\.(ts|tsx|md|sh|json|yaml|yml|toml|py|css|html)$/.test(f) || f === ".ci/run")
    .filter((f) => f !== "package-lock.json" && !f.startsWith("test/timings/") && !f.startsWith("drizzle") && existsSync(join(ROOT, f)));
}

/**
 * Text that points outside the repository or at how the work was
 * organised. The patterns are built from pieces so that this file does not
 * itself hold the words it looks for.
 */
const word = (...parts: string[]) => parts.join("");
const OUTSIDE: [RegExp, string][] = [
  [new RegExp(`\\b${word("SP", "EC")}(?:\\.md)?\\s*§`), "a citation of the old contract document (cite docs/CONTRACT.md)"],
  [new RegExp(`\\b${word("DES", "IGN")}\\.md\\b`), "a citation of the old design document (say what it means here)"],
  [new RegExp(`\\.\\./${word("sha", "red")}/`), "a path outside the repository"],
  [new RegExp(`/tmp/${word("rev", "iew")}\\b`), "a path outside the repository"],
  [new RegExp(`\\b${word("iss", "ue")}s? #?\\d+\\b`, "i"), "a ticket number"],
];

describe("the repository explains itself", () => {
  const files = textFiles();
  const texts = new Map(files.map((f) => [f, readFileSync(join(ROOT, f), "utf8")] as const));

  test("the checks see the repository (README, the contract, src/)", () => {
    expect(texts.has("README.md") && texts.has("docs/CONTRACT.md")).toBe(true);
    expect(files.filter((f) => f.startsWith("src/")).length).toBeGreaterThan(100);
  });

  test("no text cites documents outside it, or ticket numbers", () => {
    const found: string[] = [];
    for (const [f, text] of texts)
      for (const [re, what] of OUTSIDE) {
        const m = re.exec(text);
        if (m) found.push(`${f}:${text.slice(0, m.index).split("\n").length}: ${what}: ${JSON.stringify(m[0])}`);
      }
    expect(found).toEqual([]);
  });

  test("BENCHMARKS.md: at most 300 lines, one table per area, every row with its date, commit, machine and command", () => {
    const text = texts.get("BENCHMARKS.md")!;
    expect(text.trimEnd().split("\n").length).toBeLessThanOrEqual(300);
    const bad: string[] = [];
    let areas = 0;
    for (const section of text.split(/^## /m).slice(1)) {
      areas++;
      const head = section.split("\n")[0];
      const tables = section.split("\n").filter((l) => l.startsWith("| metric |")).length;
      if (tables !== 1) bad.push(`${head}: ${tables} tables`);
      for (const row of section.split("\n").filter((l) => l.startsWith("|") && !l.startsWith("| metric |") && !l.startsWith("|---"))) {
        const cells = row.split(" | ");
        const [date, commit, machine, command] = cells.slice(-4);
        if (cells.length < 8 || !date || !commit || !machine || !command || command === "|")
          bad.push(`${head}: a row without its date, commit, machine and command: ${row.slice(0, 80)}`);
      }
    }
    expect(areas).toBeGreaterThanOrEqual(10);
    expect(bad).toEqual([]);
  });

  test("every docs/CONTRACT.md §n has its heading", () => {
    const headings = new Set([...texts.get("docs/CONTRACT.md")!.matchAll(/^## §(\d+)\./gm)].map((m) => Number(m[1])));
    expect(headings.size).toBeGreaterThanOrEqual(20);
    const missing: string[] = [];
    for (const [f, text] of texts)
      for (const m of text.matchAll(/CONTRACT\.md\s*(?:\n\s*(?:\/\/|\*|#)?\s*)?((?:§\d+[/,–-]?\s*)+)/g))
        for (const n of m[1]!.matchAll(/§(\d+)/g)) if (!headings.has(Number(n[1]))) missing.push(`${f}: §${n[1]}`);
    expect(missing).toEqual([]);
  });

  test("every file the text names under src/, test/, docs/ or scripts/ exists", () => {
    const missing: string[] = [];
    for (const [f, text] of texts)
      for (const m of text.matchAll(/(?<![\w./-])((?:src|test|docs|scripts)\/[\w./*-]*\.(?:ts|tsx|md|py|css|png|json))\b/g)) {
        const p = m[1]!;
        if (p.includes("*")) continue;
        if (!existsSync(join(ROOT, p))) missing.push(`${f}: ${p}`);
      }
    expect(missing).toEqual([]);
  });
});

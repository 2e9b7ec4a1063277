// The settings are declared once (src/config/settings.ts): the docs' tables
// are written from it (bun scripts/settings-docs.ts) and must be current,
// and every environment variable the config reads is a documented setting
// or a test knob (src/config/testKnobs.ts), never both.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { settingsOf } from "../src/config/setting";
import { SETTINGS } from "../src/config/settings";
import { DOCS, tableIn } from "../scripts/settings-docs";

const ROOT = join(import.meta.dir, "..");
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");
const settingEnvs = new Set(settingsOf(SETTINGS).flatMap((s) => (s.env ? [s.env] : [])));
const knobEnvs = new Set([...read("src/config/testKnobs.ts").matchAll(/env\.(\w+)/g)].map((m) => m[1]!));

describe("the docs' settings tables", () => {
  for (const doc of DOCS)
    test(`${doc.path}'s table is the one the settings table makes (else run: bun scripts/settings-docs.ts)`, () => {
      expect(tableIn(read(doc.path))).toBe(doc.table());
    });

  test("each setting is named once: one entry per environment variable, flag and config-file key", () => {
    const all = settingsOf(SETTINGS);
    const names = (f: (s: (typeof all)[number]) => string | undefined) => all.map(f).filter((n) => n !== undefined);
    for (const list of [names((s) => s.env), names((s) => (s.kind === "external" ? undefined : s.flag)), names((s) => (s.kind === "external" ? undefined : s.file))])
      expect(list.length).toBe(new Set(list).size);
  });
});

describe("settings and test knobs", () => {
  test("every OFFPEAK_ variable the config names is a setting or a test knob, not both; knobs are in no docs table", () => {
    const sources = ["src/config.ts", ...readdirSync(join(ROOT, "src/config")).map((f) => `src/config/${f}`)];
    const named = new Set(sources.flatMap((f) => [...read(f).matchAll(/\bOFFPEAK_[A-Z0-9_]+\b/g)].map((m) => m[0])));
    // Named in docs text: read elsewhere (the allocator's re-exec), not by the config.
    named.delete("OFFPEAK_NO_REEXEC");
    // The client commands' (clientEnv: README.md "CLI"), not the server's.
    named.delete("OFFPEAK_BASE_URL");
    named.delete("OFFPEAK_API_KEY");
    expect(knobEnvs.size).toBeGreaterThan(2);
    expect([...named].filter((n) => !settingEnvs.has(n) && !knobEnvs.has(n))).toEqual([]);
    expect([...knobEnvs].filter((n) => settingEnvs.has(n))).toEqual([]);
    for (const doc of DOCS) for (const knob of knobEnvs) expect({ knob, inTable: tableIn(read(doc.path))!.includes(knob) }).toEqual({ knob, inTable: false });
  });
});

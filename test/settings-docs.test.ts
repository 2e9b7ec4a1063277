// The settings are declared once (src/config/settings.ts): the docs' tables
// are written from it (bun scripts/settings-docs.ts) and must be current,
// and every environment variable the config reads is a documented setting
// or a test knob (src/config/testKnobs.ts), never both; and each integer
// setting's range, empty value and precedence are what its entry says.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, resolveConfig } from "../src/config";
import { settingsOf, type SettingGroup } from "../src/config/setting";
import { SETTINGS } from "../src/config/settings";
import { DOCS, tableIn } from "../scripts/settings-docs";

type AnySetting = ReturnType<typeof settingsOf>[number];

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

describe("each setting resolves as its entry says", () => {
  /** The Config field an entry fills (a group's inside its object). */
  type Field = [name: string, setting: AnySetting, get: (c: any) => unknown];
  const fields: Field[] = Object.entries(SETTINGS as SettingGroup).flatMap(([k, v]): Field[] =>
    "kind" in v ? [[k, v as AnySetting, (c) => c[k]]] : Object.entries(v).map(([k2, v2]): Field => [k2, v2 as AnySetting, (c) => c[k][k2]]),
  );

  test("an integer from its environment variable: its bounds hold, outside them the start stops; empty is no value", () => {
    let checked = 0;
    for (const [name, s, get] of fields) {
      if (s.kind !== "integer" || !s.env) continue;
      const then = s.then ?? ((v: number) => v);
      expect({ name, value: get(resolveConfig([], { [s.env]: String(s.min) })) }).toEqual({ name, value: then(s.min) });
      if (s.max !== undefined) expect({ name, value: get(resolveConfig([], { [s.env]: String(s.max) })) }).toEqual({ name, value: then(s.max) });
      if (s.max !== undefined) expect(() => resolveConfig([], { [s.env!]: String(s.max! + 1) })).toThrow(ConfigError);
      if (s.min > 0) expect(() => resolveConfig([], { [s.env!]: String(s.min - 1) })).toThrow(ConfigError);
      expect(() => resolveConfig([], { [s.env!]: "x" })).toThrow(ConfigError);
      expect(get(resolveConfig([], { [s.env]: "" }))).toEqual(get(resolveConfig([], {})));
      checked++;
    }
    expect(checked).toBeGreaterThan(15);
  });

  test("a flag wins over the environment", () => {
    for (const [name, s, get] of fields) {
      if (s.kind !== "integer" || !s.flag || !s.env) continue;
      const then = s.then ?? ((v: number) => v);
      expect({ name, value: get(resolveConfig([`--${s.flag}`, String(s.min + 1)], { [s.env]: String(s.min + 2) })) }).toEqual({ name, value: then(s.min + 1) });
    }
  });
});

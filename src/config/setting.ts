// What a setting is, and what is made of a table of them (./settings.ts):
// the config file's schema, the resolved values' type, the resolver (flag >
// environment > config file > default), and the rows of the settings
// tables in README.md and docs/OPERATING.md (scripts/settings-docs.ts
// writes them; test/settings-docs.test.ts checks they are current).
//
// It imports no feature folder: it sits below them, with config.ts.
import { Type, type Static, type TSchema } from "@sinclair/typebox";

export type Env = Record<string, string | undefined>;

export class ConfigError extends Error {}

interface Common<V> {
  /** The command-line flag, without its dashes (`max-file-bytes`). */
  flag?: string;
  /** The environment variable. */
  env?: string;
  /** The config file's key, `section.key`: its schema comes from this entry. */
  file?: string;
  /** What the docs show in the config file's column when the file has it in a hand-written part (`upstreams[]`). */
  fileDoc?: string;
  /** Used when no source sets it; a function is called only then. */
  default: V | (() => V);
  /** The default as the docs tables show it. */
  defaultDoc: string;
  /** What it does, for docs/OPERATING.md's table (one line of Markdown). */
  doc: string;
  /** What it does in a few words, for README.md's table; without it, the setting is not in README's. */
  readme?: string;
  /** What is done with the value once read (a check, a unit): its error stops the start. */
  then?: (value: V) => V;
}

/** A whole number in [min, max]: from a flag or the environment, an empty value is no value. */
interface IntegerSetting<V> extends Common<V> {
  kind: "integer";
  min: number;
  max?: number;
}
/** A number in [min, max], from the config file only. */
interface NumberSetting<V> extends Common<V> {
  kind: "number";
  min: number;
  max: number;
}
/** Text as given (an empty value counts, unless `blankUnset`). */
interface TextSetting<V> extends Common<V> {
  kind: "text";
  blankUnset?: boolean;
  /** What the docs say it takes (default: text). */
  valuesDoc?: string;
}
/** One of `values`; anything else stops the start with `<label> must be a|b, got "x"`. */
interface ChoiceSetting<V> extends Common<V> {
  kind: "choice";
  values: readonly string[];
  /** An empty environment variable is no value. */
  blankUnset?: boolean;
  /** How the error names it (default: its environment variable). */
  label?: string;
}
/** Names: comma-separated in the environment, a JSON array in the file. */
interface ListSetting<V> extends Common<V> {
  kind: "list";
}
/** From the config file only, with a schema of its own (a list of objects). */
interface ShapedSetting<V> extends Common<V> {
  kind: "shaped";
  schema: TSchema;
  valuesDoc: string;
}

/** A setting that resolves to a value of type V. */
export type Setting<V> = IntegerSetting<V> | NumberSetting<V> | TextSetting<V> | ChoiceSetting<V> | ListSetting<V> | ShapedSetting<V>;

/** Documented with the others, but read elsewhere, at the process's start (src/allocator.ts): no value of the Config. */
export interface ExternalSetting {
  kind: "external";
  env: string;
  defaultDoc: string;
  doc: string;
  readme?: string;
  valuesDoc: string;
}

type AnySetting = Setting<any> | ExternalSetting;
/** Settings, and groups of them (a field of the Config that holds an object: `batches`). */
export interface SettingGroup {
  [name: string]: AnySetting | SettingGroup;
}

type Spec<V, S> = Omit<S, "kind" | "default" | "then"> & { default: NoInfer<V> | (() => NoInfer<V>); then?: (value: NoInfer<V>) => NoInfer<V> };

export const integer = <V extends number | null = number>(s: Spec<V, IntegerSetting<V>>): Setting<V> => ({ ...s, kind: "integer" }) as Setting<V>;
export const number = (s: Spec<number, NumberSetting<number>>): Setting<number> => ({ ...s, kind: "number" }) as Setting<number>;
export const text = <V extends string | null = string>(s: Spec<V, TextSetting<V>>): Setting<V> => ({ ...s, kind: "text" }) as Setting<V>;
export const choice = <const T extends readonly string[]>(values: T, s: Omit<Spec<T[number], ChoiceSetting<T[number]>>, "values">): Setting<T[number]> =>
  ({ ...s, values, kind: "choice" }) as Setting<T[number]>;
export const list = (s: Spec<string[], ListSetting<string[]>>): Setting<string[]> => ({ ...s, kind: "list" }) as Setting<string[]>;
export const shaped = <S extends TSchema>(schema: S, s: Omit<Spec<Static<S>, ShapedSetting<Static<S>>>, "schema">): Setting<Static<S>> =>
  ({ ...s, schema, kind: "shaped" }) as Setting<Static<S>>;
export const external = (s: Omit<ExternalSetting, "kind">): ExternalSetting => ({ ...s, kind: "external" });

/** The values a table of settings resolves to (external ones left out). */
export type SettingValues<T> = {
  -readonly [K in keyof T as T[K] extends ExternalSetting ? never : K]: T[K] extends Setting<infer V> ? V : SettingValues<T[K]>;
};

const isSetting = (x: AnySetting | SettingGroup): x is AnySetting => typeof (x as { kind?: unknown }).kind === "string";

/** Every setting of the table, in its order. */
export function settingsOf(table: SettingGroup): AnySetting[] {
  return Object.values(table).flatMap((x) => (isSetting(x) ? [x] : settingsOf(x)));
}

// ── the config file's schema ─────────────────────────────────────────────

function schemaOf(s: Setting<unknown>): TSchema {
  switch (s.kind) {
    case "integer":
      return Type.Integer(s.max === undefined ? { minimum: s.min } : { minimum: s.min, maximum: s.max });
    case "number":
      return Type.Number({ minimum: s.min, maximum: s.max });
    case "text":
      return Type.String();
    case "choice":
      return Type.Union(s.values.map((v) => Type.Literal(v)));
    case "list":
      return Type.Array(Type.String());
    case "shaped":
      return s.schema;
  }
}

/** The config file's sections as the table has them (`section.key`), each closed to unknown keys. */
export function fileSections(table: SettingGroup): Record<string, TSchema> {
  const sections = new Map<string, Record<string, TSchema>>();
  for (const s of settingsOf(table)) {
    if (s.kind === "external" || !s.file) continue;
    const [section, key] = s.file.split(".") as [string, string];
    if (!sections.has(section)) sections.set(section, {});
    sections.get(section)![key] = Type.Optional(schemaOf(s));
  }
  return Object.fromEntries([...sections].map(([name, props]) => [name, Type.Optional(Type.Object(props, { additionalProperties: false }))]));
}

// ── the resolver ─────────────────────────────────────────────────────────

export interface Sources {
  flags: Record<string, string | undefined>;
  env: Env;
  /** The config file as read (checked against its schema). */
  file: Record<string, unknown>;
}

/** A whole number from a flag or the environment (`name` says which in the error); empty: none. */
export function intOf(name: string, raw: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

const pick = <T>(...values: (T | undefined)[]): T | undefined => values.find((v) => v !== undefined);

/** One setting's value: flag > environment > config file > default. */
export function settingValue<V>(s: Setting<V>, src: Sources): V {
  const flag = s.flag === undefined ? undefined : src.flags[s.flag];
  const env = s.env === undefined ? undefined : src.env[s.env];
  const [section, key] = (s.file ?? ".").split(".") as [string, string];
  // (Checked against the schema when read: of this setting's type.)
  const file = s.file === undefined ? undefined : ((src.file[section] as Record<string, any> | undefined)?.[key] as any);
  let v: unknown;
  switch (s.kind) {
    case "integer":
      v = pick(intOf(`--${s.flag}`, flag, s.min, s.max), intOf(s.env ?? "", env, s.min, s.max), file);
      break;
    case "text":
    case "choice":
      v = pick(flag, s.blankUnset && env === "" ? undefined : env, file);
      break;
    case "list":
      v = env !== undefined ? env.split(",") : file;
      break;
    case "number":
    case "shaped":
      v = file;
      break;
  }
  if (v === undefined) v = typeof s.default === "function" ? (s.default as () => V)() : s.default;
  if (s.kind === "choice" && !s.values.includes(v as string)) throw new ConfigError(`${s.label ?? s.env} must be ${s.values.join("|")}, got "${v}"`);
  return s.then ? s.then(v as V) : (v as V);
}

/** Every value of the table. */
export function resolveSettings<T extends SettingGroup>(table: T, src: Sources): SettingValues<T> {
  const out: Record<string, unknown> = {};
  for (const [name, x] of Object.entries(table)) {
    if (!isSetting(x)) out[name] = resolveSettings(x, src);
    else if (x.kind !== "external") out[name] = settingValue(x, src);
  }
  return out as SettingValues<T>;
}

// ── the docs ─────────────────────────────────────────────────────────────

const code = (s: string | undefined) => (s ? `\`${s}\`` : "");

/** What a setting takes, as the docs say it. */
export function valuesDoc(s: AnySetting): string {
  switch (s.kind) {
    case "integer":
      return s.max === undefined ? `integer ≥ ${s.min.toLocaleString("en")}` : `integer ${s.min.toLocaleString("en")}–${s.max.toLocaleString("en")}`;
    case "number":
      return `number ${s.min}–${s.max}`;
    case "choice":
      return s.values.map(code).join(", ");
    case "list":
      return "names, comma-separated (a JSON array in the file)";
    case "text":
      return s.valuesDoc ?? "text";
    case "shaped":
    case "external":
      return s.valuesDoc;
  }
}

const fileColumn = (s: AnySetting) => (s.kind === "external" ? "" : code(s.file ?? s.fileDoc));
const flagColumn = (s: AnySetting) => (s.kind === "external" || !s.flag ? "" : code(`--${s.flag}`));

/** A Markdown table: its header, then a row per entry (an empty cell is `| |`). */
function markdownTable(header: string[], rows: string[][]): string {
  const line = (cells: string[]) => `|${cells.map((c) => (c ? ` ${c} ` : " ")).join("|")}|`;
  return [line(header), `|${header.map(() => "---").join("|")}|`, ...rows.map(line)].join("\n");
}

/** docs/OPERATING.md's table: every setting. */
export function operatingTable(table: SettingGroup): string {
  const rows = settingsOf(table).map((s) => [flagColumn(s), code(s.env), fileColumn(s), s.defaultDoc, valuesDoc(s), s.doc]);
  return markdownTable(["flag", "environment", "config file", "default", "values", "meaning"], rows);
}

/** README.md's table: the settings that have a `readme` line. */
export function readmeTable(table: SettingGroup): string {
  const rows = settingsOf(table)
    .filter((s) => s.readme)
    .map((s) => [flagColumn(s), code(s.env), fileColumn(s), s.defaultDoc, s.readme!]);
  return markdownTable(["flag", "environment", "config file", "default", "meaning"], rows);
}

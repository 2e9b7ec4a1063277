// Command-line flags, for the server (`serve`, `keys`: config.ts) and the
// client commands (src/cli/) alike, on node:util's parseArgs. Each command
// declares its flags, so a boolean flag never swallows the next word, an
// unknown flag or a value flag given no value is a usage error (exit 2)
// instead of being ignored or read as "true", and a list flag collects its
// repeats. The caller says which error a usage mistake throws (ConfigError
// for the server, CliError for the client): both end in exit 2.
import { parseArgs } from "node:util";

/** string: `--name value` or `--name=value` (the last one given wins); boolean: `--name` (or `--name=true|false`); list: a string flag that may repeat. */
export type FlagKind = "string" | "boolean" | "list";
export type FlagSpec = Record<string, FlagKind>;

export interface ParsedFlags {
  flags: Record<string, string | undefined>;
  bools: Record<string, boolean>;
  lists: Record<string, string[]>;
  positional: string[];
}

/** One-letter forms, each for the long flag it names when the command takes that flag. */
const SHORT: Record<string, string> = { h: "help", o: "out" };

type Token = ReturnType<typeof tokenize>[number];

function tokenize(argv: readonly string[], spec: FlagSpec) {
  const options: Record<string, { type: "string" | "boolean"; multiple?: boolean; short?: string }> = {};
  for (const [name, kind] of Object.entries(spec)) options[name] = { type: kind === "boolean" ? "boolean" : "string", ...(kind === "list" ? { multiple: true } : {}) };
  for (const [short, long] of Object.entries(SHORT)) if (options[long]) options[long].short = short;
  // Not strict: the checks (and their messages) are ours, below.
  return parseArgs({ args: [...argv], options, strict: false, allowPositionals: true, tokens: true }).tokens;
}

/**
 * `argv` read against `spec`: flags anywhere among the positional words,
 * `--` ends the flags. `fail` makes the error thrown for an unknown flag, a
 * value flag with no value (a following `--word` is not its value:
 * `--data-dir --port 1` is a mistake, not a folder named "--port"), or a
 * value given to a boolean flag.
 */
export function parseFlags(argv: readonly string[], spec: FlagSpec, fail: (message: string) => Error): ParsedFlags {
  const out: ParsedFlags = { flags: {}, bools: {}, lists: {}, positional: [] };
  for (const t of tokenize(argv, spec)) {
    if (t.kind === "positional") out.positional.push(t.value);
    if (t.kind !== "option") continue;
    const kind = Object.hasOwn(spec, t.name) ? spec[t.name] : undefined;
    if (!kind) throw fail(`unknown option ${t.rawName}`);
    if (kind === "boolean") {
      if (t.value !== undefined && t.value !== "true" && t.value !== "false") throw fail(`--${t.name} takes no value`);
      out.bools[t.name] = t.value !== "false";
      continue;
    }
    if (t.value === undefined || (!t.inlineValue && t.value.startsWith("--"))) throw fail(`--${t.name} needs a value`);
    if (kind === "list") (out.lists[t.name] ??= []).push(t.value);
    else out.flags[t.name] = t.value;
  }
  return out;
}

/** A positional word and where it stands in argv. */
export interface Word {
  value: string;
  index: number;
}

/**
 * The positional words of a command line whose command is not known yet
 * (main.ts picks the command from the first). Flags in `spec` are read as
 * declared; any other `--flag` (one of a client command's, given before its
 * name) takes the word after it as its value, so `offpeak --base-url URL
 * files list` finds `files`. `help` says whether --help or -h was given.
 */
export function commandWords(argv: readonly string[], spec: FlagSpec): { words: Word[]; help: boolean } {
  const tokens: Token[] = tokenize(argv, spec);
  const words: Word[] = [];
  let help = false;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.kind === "positional") words.push({ value: t.value, index: t.index });
    if (t.kind !== "option") continue;
    if (t.name === "help") help = true;
    const next = tokens[i + 1];
    const unknownLong = !Object.hasOwn(spec, t.name) && t.rawName.startsWith("--") && t.value === undefined;
    if (unknownLong && next?.kind === "positional" && next.index === t.index + 1) i++;
  }
  return { words, help };
}

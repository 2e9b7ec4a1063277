// Argument parsing for the client commands: each verb declares its flags, so
// a boolean flag never swallows the next word, an unknown flag is a usage
// error (exit 2) instead of being ignored, and repeated flags collect.
import { forProgram, prog } from "./program";

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    /** "connection": the server could not be reached (a wait may retry). */
    readonly kind: "usage" | "connection" | "http" | "batch" = "usage",
  ) {
    super(message);
  }
}

/** Bad usage, an unreachable server, or a request the server refused: exit 2. */
export const usageError = (message: string) => new CliError(message, 2);

export type FlagKind = "string" | "boolean" | "list";
export type FlagSpec = Record<string, FlagKind>;

export interface Parsed {
  flags: Record<string, string | undefined>;
  bools: Record<string, boolean>;
  lists: Record<string, string[]>;
  positional: string[];
}

/** Flags every client command takes. */
export const CONNECTION_FLAGS: FlagSpec = { "base-url": "string", "api-key": "string", help: "boolean" };

const SHORT: Record<string, string> = { h: "help", o: "out" };

export function parseArgs(argv: string[], spec: FlagSpec): Parsed {
  const all: FlagSpec = { ...CONNECTION_FLAGS, ...spec };
  const out: Parsed = { flags: {}, bools: {}, lists: {}, positional: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      out.positional.push(...argv.slice(i + 1));
      break;
    }
    let name: string;
    let inline: string | undefined;
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      name = eq > 0 ? arg.slice(2, eq) : arg.slice(2);
      inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    } else if (/^-[a-zA-Z]$/.test(arg)) {
      const long = SHORT[arg.slice(1)];
      if (!long || !(long in all)) throw usageError(`unknown option ${arg}`);
      name = long;
    } else {
      out.positional.push(arg);
      continue;
    }
    const kind = all[name];
    if (!kind) throw usageError(`unknown option --${name}`);
    if (kind === "boolean") {
      if (inline !== undefined && !["true", "false"].includes(inline)) throw usageError(`--${name} takes no value`);
      out.bools[name] = inline !== "false";
      continue;
    }
    let value = inline;
    if (value === undefined) {
      if (i + 1 >= argv.length) throw usageError(`--${name} needs a value`);
      value = argv[++i]!;
    }
    if (kind === "list") (out.lists[name] ??= []).push(value);
    else out.flags[name] = value;
  }
  return out;
}

/** A number flag in [min, max], or the default. */
export function numberFlag(p: Parsed, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = p.flags[name];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(n) || n < min || n > max) throw usageError(`--${name} must be a number from ${min} to ${max}, got "${raw}"`);
  return n;
}

/** Exactly `count` positional arguments, named in the message when missing. */
export function positionals(p: Parsed, names: string[], usageLine: string): string[] {
  if (p.positional.length < names.length) throw usageError(`missing ${names.slice(p.positional.length).join(" ")}\n${forProgram(`usage: ${usageLine}`)}`);
  if (p.positional.length > names.length) throw usageError(`unexpected argument '${p.positional[names.length]}'\n${forProgram(`usage: ${usageLine}`)}`);
  return p.positional;
}

/** The server on this machine, on PORT as the server itself would read it (so a container that sets PORT needs nothing more). */
export const defaultBaseUrl = (env: Record<string, string | undefined>) => `http://127.0.0.1:${env.PORT || "8080"}/v1`;

export interface Connection {
  baseUrl: string;
  apiKey: string;
}

/**
 * --base-url > OFFPEAK_BASE_URL > http://127.0.0.1:$PORT/v1 (8080 without PORT); a URL without a
 * path gets /v1. --api-key > OFFPEAK_API_KEY > OFFPEAK_ADMIN_KEY (handy inside
 * the server's own container).
 */
export function connection(p: Parsed, env: Record<string, string | undefined> = process.env): Connection {
  const raw = p.flags["base-url"] ?? (env.OFFPEAK_BASE_URL || undefined) ?? defaultBaseUrl(env);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw usageError(`--base-url is not a URL: "${raw}"`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw usageError(`--base-url must be http:// or https://, got "${raw}"`);
  let path = url.pathname.replace(/\/+$/, "");
  if (path === "") path = "/v1";
  const baseUrl = `${url.protocol}//${url.host}${path}`;
  const apiKey = p.flags["api-key"] ?? (env.OFFPEAK_API_KEY || undefined) ?? (env.OFFPEAK_ADMIN_KEY || undefined);
  if (!apiKey) throw usageError("no API key: pass --api-key KEY or set OFFPEAK_API_KEY");
  return { baseUrl, apiKey };
}

/** `key=value` pairs of a list flag, as an object. */
export function keyValues(p: Parsed, name: string): Record<string, string> | undefined {
  const items = p.lists[name];
  if (!items?.length) return undefined;
  const out: Record<string, string> = {};
  for (const item of items) {
    const eq = item.indexOf("=");
    if (eq <= 0) throw usageError(`--${name} takes key=value, got "${item}"`);
    out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}

/**
 * A command group's entry (`offpeak files …`): the verb picks the handler,
 * which gets the rest of the arguments. No verb: the help on stderr, exit 2;
 * `--help`, `-h` or `help`: the help on stdout, exit 0.
 */
export function dispatchVerb(
  argv: string[],
  group: { name: string; help: string; verbs: Record<string, (argv: string[]) => Promise<number>>; listed: string },
): Promise<number> {
  const verb = argv[0];
  if (!verb) {
    process.stderr.write(forProgram(group.help));
    return Promise.resolve(2);
  }
  if (verb === "--help" || verb === "-h" || verb === "help") {
    process.stdout.write(forProgram(group.help));
    return Promise.resolve(0);
  }
  const handler = Object.hasOwn(group.verbs, verb) ? group.verbs[verb] : undefined;
  if (!handler) throw usageError(`unknown ${group.name} command '${verb}' (${group.listed}; see ${prog()} ${group.name} --help)`);
  return handler(argv.slice(1));
}

/** A verb's own `--help`: prints `help` and says so. */
export function helped(p: Parsed, help: string): boolean {
  if (p.bools.help) process.stdout.write(forProgram(help));
  return !!p.bools.help;
}

// The client commands' arguments: each verb declares its flags (read by
// src/flags.ts, the server's parser too), and the connection comes from the
// flags, else the environment (config.ts clientEnv).
import { clientEnv, type ClientEnv } from "../config";
import { parseFlags, type FlagSpec, type ParsedFlags } from "../flags";
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

export type { FlagSpec } from "../flags";
export type Parsed = ParsedFlags;

/** Flags every client command takes. */
export const CONNECTION_FLAGS: FlagSpec = { "base-url": "string", "api-key": "string", help: "boolean" };

/** A verb's arguments: its own flags and the connection flags; a mistake is a usage error (exit 2). */
export const parseVerb = (argv: string[], spec: FlagSpec): Parsed => parseFlags(argv, { ...CONNECTION_FLAGS, ...spec }, usageError);

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

export interface Connection {
  baseUrl: string;
  apiKey: string;
}

/**
 * --base-url > OFFPEAK_BASE_URL > http://127.0.0.1:$PORT/v1 (8080 without PORT); a URL without a
 * path gets /v1. --api-key > OFFPEAK_API_KEY > OFFPEAK_ADMIN_KEY.
 */
export function connection(p: Parsed, env: ClientEnv = clientEnv()): Connection {
  const raw = p.flags["base-url"] ?? env.baseUrl;
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
  const apiKey = p.flags["api-key"] ?? env.apiKey;
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

// What `offpeak serve` says first, for people (docs/CONTRACT.md §19): where the console
// is, the API base, where the data lives, and on the first start the admin
// key, framed so that it stands out from the JSON log lines that follow (on
// stderr). Printed on stdout once, when the server is ready.
import { resolve } from "node:path";
import type { DatabaseConfig } from "./db/client";

export interface BannerInfo {
  version: string;
  /** What the server listens on (config.host) and the port it got. */
  host: string;
  port: number;
  dataDir: string;
  database: DatabaseConfig;
  /** config.storage's URL: `file:` or `s3://…`. */
  storageUrl: string;
  /** The key the first start made (shown only here), or null. */
  bootstrapKey: string | null;
  /** OFFPEAK_ADMIN_KEY is set. */
  envAdminKey: boolean;
  /** How to run the CLI here (`npx offpeak`, `offpeak`, a path). */
  cli: string;
}

const WILDCARD: Record<string, string> = { "0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1" };

/** An address a browser on this machine can open: a wildcard host becomes loopback, IPv6 goes in brackets. */
export function reachableOrigin(host: string, port: number): { origin: string; everyAddress: boolean } {
  const everyAddress = host in WILDCARD;
  const h = WILDCARD[host] ?? host;
  return { origin: `http://${h.includes(":") ? `[${h}]` : h}:${port}`, everyAddress };
}

/** A Postgres URL without its password. */
const withoutPassword = (url: string) => url.replace(/^(postgres(?:ql)?:\/\/[^:@/]*):[^@/]*@/, "$1:***@");

export function startBanner(b: BannerInfo): string {
  const { origin, everyAddress } = reachableOrigin(b.host, b.port);
  const rows: [string, string][] = [
    ["Console", `${origin}/${everyAddress ? `   (on every address of this machine: ${b.host || "all"})` : ""}`],
    ["API base", `${origin}/api/v1   (also ${origin}/v1)`],
    ["Data", resolve(b.dataDir)],
  ];
  if (b.database.kind === "postgres") rows.push(["Database", withoutPassword(b.database.url)]);
  if (b.storageUrl !== "file:") rows.push(["Storage", b.storageUrl]);
  if (b.envAdminKey) rows.push(["Admin key", "OFFPEAK_ADMIN_KEY"]);
  rows.push(["CLI", `${b.cli} --help`]);
  const width = Math.max(...rows.map(([k]) => k.length));
  let out = `\noffpeak ${b.version} is ready\n\n`;
  for (const [k, v] of rows) out += `  ${k.padEnd(width)}  ${v}\n`;
  out += "\n";
  if (b.bootstrapKey) out += framed(["First start: an admin key was made.", "It is shown only this once: keep it somewhere safe.", "", `  ${b.bootstrapKey}`, "", "Sign in to the console with it, or give it to the CLI", "and the SDKs as OFFPEAK_API_KEY."]) + "\n";
  return out;
}

/** Lines in a box (box-drawing characters), indented by two. */
export function framed(lines: string[]): string {
  const inner = Math.max(...lines.map((l) => l.length)) + 2;
  const bar = "─".repeat(inner + 2);
  return [`  ┌${bar}┐`, ...lines.map((l) => `  │  ${l.padEnd(inner)}│`), `  └${bar}┘`].join("\n") + "\n";
}

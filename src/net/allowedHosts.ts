// Which internal hosts an operator opened (webhooks.allowed_hosts): host
// names, `*.name`s, IP addresses and CIDR ranges, read once. Below the
// features that use it (webhooks/egress.ts) so that the config can check
// the setting at start without loading them.
import { parseRange, type Range } from "./addresses";

export interface EgressPolicy {
  /** Host names opened whole (any address they resolve to). */
  names: Set<string>;
  /** `*.example.internal` entries, kept as ".example.internal". */
  suffixes: string[];
  /** Address ranges opened (whatever name leads there). */
  ranges: Range[];
}

const HOST_NAME = /^(?:\*\.)?[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$/;

/** A lower-case name without brackets or the trailing dot: how hosts are compared. */
export function hostKey(hostname: string): string {
  let h = hostname.toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  return h.replace(/\.+$/, "");
}

/** `webhooks.allowed_hosts` → a policy; throws an Error naming the first entry it cannot read. */
export function parseAllowedHosts(entries: readonly string[]): EgressPolicy {
  const policy: EgressPolicy = { names: new Set(), suffixes: [], ranges: [] };
  for (const raw of entries) {
    const entry = hostKey(raw.trim());
    const range = parseRange(entry);
    if (range) policy.ranges.push(range);
    else if (entry.includes("/") || entry.includes(":") || !HOST_NAME.test(entry))
      throw new Error(`"${raw}" is neither a host name (optionally *.name) nor an IP address or CIDR range`);
    else if (entry.startsWith("*.")) policy.suffixes.push(entry.slice(1));
    else policy.names.add(entry);
  }
  return policy;
}

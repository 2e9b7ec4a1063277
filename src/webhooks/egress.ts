// Where webhooks may go (docs/CONTRACT.md §16). Anyone with an admin key picks the URL,
// and the server then POSTs to it from inside the network it runs in: left
// open, that is a way to reach the cloud metadata service, a database's
// HTTP port or an admin UI on loopback. So a host that is, or resolves to,
// an internal address (./addresses.ts) is refused, unless the operator
// opened it with `webhooks.allowed_hosts`.
//
// The same check runs when an endpoint is created (a clear 400) and before
// every delivery, on the addresses resolved for that delivery; the sender
// then dials the checked address itself (./post.ts), so a DNS answer that
// changes in between (rebinding) cannot lead it anywhere unchecked.
import { lookup as dnsLookup } from "node:dns/promises";
import { classify, embeddedV4, inRange, ipBytes, parseRange, type AddressClass, type Range } from "./addresses";

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

const compiled = new WeakMap<readonly string[], EgressPolicy>();

/** The policy of a config's (already checked) entries, read once per config. */
export function egressPolicy(entries: readonly string[]): EgressPolicy {
  let p = compiled.get(entries);
  if (!p) compiled.set(entries, (p = parseAllowedHosts(entries)));
  return p;
}

export type Resolver = (host: string) => Promise<{ address: string; family: number }[]>;

export const systemResolver: Resolver = (host) => dnsLookup(host, { all: true, verbatim: true });

export type Verdict =
  | { ok: true; address: string; family: 4 | 6 }
  /** Refused: the first internal address found, and what kind it is (for logs and the 400's message). */
  | { ok: false; reason: "not_allowed"; class: AddressClass; address: string }
  | { ok: false; reason: "dns_failed"; code: string };

/**
 * Resolves `hostname` and checks every address it gets (one internal
 * address among public ones is enough to refuse: which one a client
 * dials is not ours to choose at creation). On success, the address to dial.
 */
export async function checkTarget(hostname: string, policy: EgressPolicy, resolve: Resolver = systemResolver): Promise<Verdict> {
  const host = hostKey(hostname);
  const nameOpen = policy.names.has(host) || policy.suffixes.some((s) => host.endsWith(s));
  let addresses: string[];
  if (ipBytes(host)) addresses = [host];
  // RFC 6761: these names are loopback whatever a resolver says, and some resolvers say nothing.
  else if (host === "localhost" || host.endsWith(".localhost")) addresses = ["127.0.0.1", "::1"];
  else {
    try {
      addresses = (await resolve(host)).map((a) => a.address);
    } catch (e) {
      return { ok: false, reason: "dns_failed", code: String((e as { code?: unknown }).code ?? "unknown") };
    }
    if (addresses.length === 0) return { ok: false, reason: "dns_failed", code: "ENODATA" };
  }
  for (const address of addresses) {
    const bytes = ipBytes(address);
    if (!bytes) return { ok: false, reason: "dns_failed", code: "EBADRESP" };
    if (nameOpen || rangeOpen(policy, bytes)) continue;
    const cls = classify(bytes);
    if (cls) return { ok: false, reason: "not_allowed", class: cls, address };
  }
  const first = addresses[0]!;
  return { ok: true, address: first, family: ipBytes(first)!.length === 4 ? 4 : 6 };
}

function rangeOpen(policy: EgressPolicy, addr: Uint8Array): boolean {
  if (policy.ranges.some((r) => inRange(addr, r))) return true;
  // ::ffff:10.0.0.5 leads where 10.0.0.5 does: an opened IPv4 range opens it too.
  const v4 = embeddedV4(addr);
  return v4 !== null && policy.ranges.some((r) => inRange(v4, r));
}

// Where webhooks may go (docs/CONTRACT.md §16). Anyone with an admin key picks the URL,
// and the server then POSTs to it from inside the network it runs in: left
// open, that is a way to reach the cloud metadata service, a database's
// HTTP port or an admin UI on loopback. So a host that is, or resolves to,
// an internal address (src/net/addresses.ts) is refused, unless the operator
// opened it with `webhooks.allowed_hosts`.
//
// The same check runs when an endpoint is created (a clear 400) and before
// every delivery, on the addresses resolved for that delivery; the sender
// then dials the checked address itself (./post.ts), so a DNS answer that
// changes in between (rebinding) cannot lead it anywhere unchecked.
import { lookup as dnsLookup } from "node:dns/promises";
import { classify, embeddedV4, inRange, ipBytes, type AddressClass } from "../net/addresses";
import { hostKey, parseAllowedHosts, type EgressPolicy } from "../net/allowedHosts";

export { hostKey, parseAllowedHosts, type EgressPolicy } from "../net/allowedHosts";

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

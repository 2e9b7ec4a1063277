// Which IP addresses a webhook may be sent to (docs/CONTRACT.md §16). An address is
// judged as bytes, never as text: the URL parser and the resolver already
// turn `0x7f000001`, `2130706433`, `0177.0.0.1` and `127.1` into 127.0.0.1,
// and IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64,
// 6to4) are judged by the IPv4 address inside, which is where they lead.
import { isIP } from "node:net";

/** Why an address is internal; null from `classify` means it is public. */
export type AddressClass = "loopback" | "link-local" | "private" | "unspecified" | "multicast" | "reserved";

export interface Range {
  bytes: Uint8Array;
  bits: number;
}

/** The address's bytes (4 or 16), or null when it is not an IP literal (brackets allowed). */
export function ipBytes(text: string): Uint8Array | null {
  const ip = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  const family = isIP(ip);
  if (family === 4) return Uint8Array.from(ip.split(".").map(Number));
  if (family !== 6) return null;
  const out = new Uint8Array(16);
  const [head, tail] = ip.includes("::") ? ip.split("::") : [ip, null];
  // A trailing dotted IPv4 part stands for the last two groups.
  const groups = (s: string | null | undefined) =>
    !s
      ? []
      : s.split(":").flatMap((g) => {
          if (!g.includes(".")) return [parseInt(g, 16)];
          const [a, b, c, d] = g.split(".").map(Number) as [number, number, number, number];
          return [(a << 8) | b, (c << 8) | d];
        });
  const h = groups(head);
  const t = tail === null ? [] : groups(tail);
  const all = tail === null ? h : [...h, ...new Array(8 - h.length - t.length).fill(0), ...t];
  all.forEach((g, i) => {
    out[2 * i] = g >> 8;
    out[2 * i + 1] = g & 0xff;
  });
  return out;
}

export function parseRange(cidr: string): Range | null {
  const slash = cidr.indexOf("/");
  const bytes = ipBytes(slash < 0 ? cidr : cidr.slice(0, slash));
  if (!bytes) return null;
  const max = bytes.length * 8;
  if (slash < 0) return { bytes, bits: max };
  const bitsText = cidr.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bitsText) || Number(bitsText) > max) return null;
  return { bytes, bits: Number(bitsText) };
}

export function inRange(addr: Uint8Array, r: Range): boolean {
  if (addr.length !== r.bytes.length) return false;
  let bits = r.bits;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((addr[i]! & mask) !== (r.bytes[i]! & mask)) return false;
  }
  return true;
}

const table = (rows: [string, AddressClass][]) => rows.map(([cidr, cls]) => ({ range: parseRange(cidr)!, cls }));

const V4 = table([
  ["0.0.0.0/8", "unspecified"], // "this network": 0.0.0.0 dials the local host
  ["10.0.0.0/8", "private"],
  ["100.64.0.0/10", "private"], // carrier-grade NAT; also Alibaba Cloud's metadata 100.100.100.200
  ["127.0.0.0/8", "loopback"],
  ["169.254.0.0/16", "link-local"], // the cloud metadata address 169.254.169.254
  ["172.16.0.0/12", "private"],
  ["192.0.0.0/24", "reserved"], // IETF protocol assignments (Oracle Cloud's metadata 192.0.0.192)
  ["192.168.0.0/16", "private"],
  ["198.18.0.0/15", "reserved"], // benchmarking, used inside data centres
  ["224.0.0.0/4", "multicast"],
  ["240.0.0.0/4", "reserved"], // and the broadcast 255.255.255.255
]);

const V6 = table([
  ["::/128", "unspecified"],
  ["::1/128", "loopback"],
  ["64:ff9b:1::/48", "private"], // local-use NAT64
  ["fc00::/7", "private"], // unique local, the AWS metadata fd00:ec2::254 among them
  ["fe80::/10", "link-local"],
  ["fec0::/10", "private"], // the old site-local
  ["ff00::/8", "multicast"],
]);

/** IPv6 prefixes whose address holds an IPv4 address, and where it starts. */
const V4_INSIDE: { range: Range; at: number }[] = [
  { range: parseRange("::ffff:0:0/96")!, at: 12 }, // IPv4-mapped
  { range: parseRange("::ffff:0:0:0/96")!, at: 12 }, // IPv4-translated
  { range: parseRange("::/96")!, at: 12 }, // IPv4-compatible (deprecated)
  { range: parseRange("64:ff9b::/96")!, at: 12 }, // NAT64
  { range: parseRange("2002::/16")!, at: 2 }, // 6to4
];

/** The IPv4 address an IPv6 address leads to, if it carries one. */
export function embeddedV4(addr: Uint8Array): Uint8Array | null {
  if (addr.length !== 16) return null;
  for (const { range, at } of V4_INSIDE) if (inRange(addr, range)) return addr.slice(at, at + 4);
  return null;
}

/** What kind of internal address this is, or null for a public one. */
export function classify(addr: Uint8Array): AddressClass | null {
  for (const { range, cls } of addr.length === 4 ? V4 : V6) if (inRange(addr, range)) return cls;
  const v4 = embeddedV4(addr);
  return v4 ? classify(v4) : null;
}

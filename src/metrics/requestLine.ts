// The fields of the one log line per HTTP request, written as JSON text
// directly. Built the generic way (a fields object, JSON.stringify, a scan
// of every field for secrets) the line takes ≈20% of the main thread's busy
// time in the chat pass-through (bun --cpu-prof under wrk -c32): most of its
// parts repeat from request to request (method, route, path, the key), so
// their JSON text is made once and kept; what changes (id, status, duration)
// is a number or an id offpeak made, which needs no escaping.
//
// (The method, route and path members are kept per method and path by the
// caller, with the route's metrics: one lookup per request for all of them.)
//
// Redaction, as the generic path does it: the path is cut to 200 characters
// and any `sk-…` in it replaced; a project name that looks like a secret is
// replaced once per key. Headers and bodies are never in the line.
import { attached } from "../attached";
import { principalIfKnown } from "../auth/plugin";
import type { Principal } from "../auth/verify";
import { requestIdOf } from "../http/requestId";

/** A key sent where it does not belong (a path) must not reach the log. */
export const redactPath = (p: string) => (p.length > 200 ? p.slice(0, 200) + "…" : p).replace(/sk-[A-Za-z0-9_-]+/g, "sk-[redacted]");
const SECRET_TEXT = /sk-[A-Za-z0-9_-]{6,}|Bearer\s+[^\s"',]+/gi;

/** JSON text of strings from small sets, made once each (bounded: a flood of distinct values starts over). */
function memoJson(max: number, toText: (v: string) => string = (v) => v) {
  const memo = new Map<string, string>();
  return (value: string): string => {
    let text = memo.get(value);
    if (text === undefined) {
      text = JSON.stringify(toText(value));
      if (memo.size >= max) memo.clear();
      memo.set(value, text);
    }
    return text;
  };
}

const clientJson = memoJson(1024);

/** `"method":…,"route":…,"path":…` (the path cut and redacted): the caller keeps it per method and path (src/metrics/http.ts). */
export const routeMembers = (method: string, pattern: string, path: string): string =>
  `"method":${JSON.stringify(method)},"route":${JSON.stringify(pattern)},"path":${JSON.stringify(redactPath(path))}`;

/** `,"key_id":…,"project":…` for a key, made once per principal object (the verifier caches them). */
const principalText = attached<string>("logMembers");
const ANONYMOUS = `,"key_id":null,"project":null`;
function principalMembers(p: Principal | undefined): string {
  if (!p) return ANONYMOUS;
  let text = principalText.get(p);
  if (text === undefined) {
    text = `,"key_id":${JSON.stringify(p.keyId)},"project":${JSON.stringify(p.project.replace(SECRET_TEXT, "[redacted]"))}`;
    principalText.set(p, text);
  }
  return text;
}

/** The same, then `,"client":null`: the end of most lines (a key, no address asked), also made once per principal object. */
const principalTail = attached<string>("logTail");
function tailWithoutClient(p: Principal): string {
  let text = principalTail.get(p);
  if (text === undefined) principalTail.set(p, (text = principalMembers(p) + `,"client":null`));
  return text;
}

/**
 * `,<route members>,"status":N,"duration_ms":` for a route (the caller's
 * text for its method and path, the same string each time) and a status:
 * the middle of a line, made once per pair (bounded, like the caller's).
 */
const middles = new Map<string, Map<number, string>>();
function middleOf(route: string, status: number): string {
  let byStatus = middles.get(route);
  if (!byStatus) {
    if (middles.size >= 1024) middles.clear();
    middles.set(route, (byStatus = new Map()));
  }
  let text = byStatus.get(status);
  if (text === undefined) byStatus.set(status, (text = `",${route},"status":${status},"duration_ms":`));
  return text;
}

type RequestIP = { requestIP(r: Request): { address: string } | null };

/**
 * The request line's fields as JSON members (see OPERATING.md "Logs" for the
 * fields). `client` is the peer's address on lines without a valid key, and
 * on every line with `everyClient` (config logClientAddress: asking the
 * socket costs a syscall per request); null otherwise.
 */
export function requestMembers(
  request: Request,
  server: RequestIP | undefined,
  pattern: string,
  path: string,
  status: number,
  seconds: number,
  everyClient = true,
  route = routeMembers(request.method, pattern, path),
): string {
  const principal = principalIfKnown(request);
  const address = principal === undefined || everyClient ? server?.requestIP(request)?.address : undefined;
  // Four joins: the parts that repeat from line to line are made once (≈0.1 µs a line; bench/request-log.ts).
  const tail = address === undefined && principal !== undefined ? tailWithoutClient(principal) : `${principalMembers(principal)},"client":${address === undefined ? "null" : clientJson(address)}`;
  return `"request_id":"` + requestIdOf(request) + middleOf(route, status) + Math.round(seconds * 100_000) / 100 + tail;
}

// The path of a request, decided once, for routing and authentication alike.
//
// Routing and authentication must read the same path (docs/CONTRACT.md §16): when they
// disagreed, `Host: x` with the target `/aa/api/v1/keys` made the auth check
// see `/aa/api/v1/keys` (outside the API base, so public) while Elysia's
// router, which takes the path from a fixed offset of the URL, routed it to
// `/api/v1/keys` and minted an admin key for nobody. `routable()` puts every
// request into the one form in which both read the same characters.

/**
 * Where the path starts in a request URL as Bun gives it: after
 * "scheme://host", or at 0 when Bun hands over the bare target (it does so
 * when the Host header is absent or not a valid host, e.g. `a/b`, `u@h`).
 */
function pathStart(url: string): number {
  if (url.charCodeAt(0) === 47) return 0;
  const scheme = url.indexOf("://");
  if (scheme === -1) return url.length;
  const slash = url.indexOf("/", scheme + 3);
  return slash === -1 ? url.length : slash;
}

// The path of a request URL as sent (not URL.pathname, which re-encodes some
// characters), without the query: for routing decisions, scopes, metrics
// labels and ids that may contain "/".
export function pathOf(url: string): string {
  const start = pathStart(url);
  if (start === url.length) return "/";
  const q = url.indexOf("?", start);
  return q === -1 ? url.slice(start) : url.slice(start, q);
}

/** The request target from the path on, query included ("/" when there is none). */
export function targetOf(url: string): string {
  const start = pathStart(url);
  return start === url.length ? "/" : url.slice(start);
}

/**
 * Elysia's router (1.4, adapter/bun/compose) takes the path from the first
 * "/" at or after index 11 of the URL: it assumes "http://" plus a host of
 * at least four characters. test/security.test.ts checks the assumption
 * against the router itself with one- to three-character hosts.
 */
const ROUTER_PATH_FROM = 11;

/** A host long enough for the router's offset, in no one's namespace (RFC 2606). */
const CANONICAL_ORIGIN = "http://offpeak.invalid";

/**
 * The request as the router and authentication will both read it: the same
 * object when they agree on its path (every well-formed request: one
 * `indexOf`), otherwise a copy under a canonical origin with the same
 * method, headers, body and path. Only hostile or odd requests are copied
 * (a Host of one to three characters, none, or one Bun refused); the copy
 * has no socket, so their request line carries no client address.
 */
export function routable(request: Request): Request {
  const url = request.url;
  const start = pathStart(url);
  if (start >= ROUTER_PATH_FROM && url.indexOf("/", ROUTER_PATH_FROM) === start) return request;
  const rest = targetOf(url);
  return new Request(CANONICAL_ORIGIN + (rest.charCodeAt(0) === 47 ? rest : "/" + rest), request);
}

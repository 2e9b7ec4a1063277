// Authentication happens in onRequest, before any body is parsed: a request
// under the API base without a valid `Authorization: Bearer` key (or
// `x-api-key`, as Anthropic's SDKs send it: docs/CONTRACT.md §22) gets 401
// and nothing else runs; a key without the route's scope (routeScopes.ts,
// the one place that says which scope a route needs) gets 403, also before
// any parsing.
//
// We do not use @elysiajs/bearer: it falls back to a `?access_token=` query
// parameter, and docs/CONTRACT.md §2/§10 require a key in the query string to be refused.
import { attached } from "../attached";
import { ApiError } from "../errors";
import { hasScope, type Scope } from "./scopes";
import type { Principal, Verify } from "./verify";

/** The key each request was authenticated with (set in admit). */
export const principals = attached<Principal>("principal");

/** The request's key, if it has been checked (error answers use this: they may come before). */
export const principalIfKnown = (request: Request): Principal | undefined => principals.get(request);

export function principalOf(request: Request): Principal {
  const p = principals.get(request);
  if (!p) throw new ApiError("invalid_api_key", "Missing API key", {});
  return p;
}

/**
 * `needed`: the scope routeScope gives the route (null: any valid key); the
 * direct dispatch decides it once per route.
 */
export function authenticate(request: Request, verify: Verify, needed: Scope | null): void | Promise<void> {
  const header = authorizationOf(request.headers);
  if (!header) throw new ApiError("invalid_api_key", "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'");
  const secret = bearerSecret(header);
  if (secret === null) throw new ApiError("invalid_api_key", "Malformed Authorization header: expected 'Bearer <key>'");
  const found = verify(secret);
  // A cached key answers at once (no promise on the hot path); an unknown one after its lookup.
  if (found instanceof Promise) return found.then((p) => admit(request, p, needed));
  admit(request, found, needed);
}

/**
 * The request's Authorization header; without one, an `x-api-key: <key>`
 * read as `Bearer <key>` (Anthropic's SDKs send the key so; their
 * `anthropic-version` header is not read). Front threads pass this on as the
 * request's key (src/http/front/fast.ts).
 */
export function authorizationOf(headers: { get(name: string): string | null }): string | null {
  const header = headers.get("authorization");
  if (header !== null) return header;
  const key = headers.get("x-api-key");
  return key === null ? null : `Bearer ${key}`;
}

/**
 * The key in `Bearer <key>` (scheme in any case, one or more spaces before
 * the key, spaces after it), or null. What /^Bearer +(\S+) *$/i matches,
 * without the match array (this runs on every request).
 */
export function bearerSecret(header: string): string | null {
  if (header.length < 8 || header.charCodeAt(6) !== 32) return null;
  // "bearer" in any case: each letter with the ASCII case bit set is its lower case.
  for (let i = 0; i < 6; i++) if ((header.charCodeAt(i) | 32) !== BEARER[i]) return null;
  let start = 7;
  while (header.charCodeAt(start) === 32) start++;
  let end = header.length;
  while (end > start && header.charCodeAt(end - 1) === 32) end--;
  if (end === start) return null;
  for (let i = start; i < end; i++) if (isSpace(header.charCodeAt(i))) return null;
  return header.slice(start, end);
}

const BEARER = [98, 101, 97, 114, 101, 114]; // "bearer"

/** What /\s/ matches, by code unit (ASCII and Unicode spaces). */
function isSpace(c: number): boolean {
  if (c > 32 && c < 160) return false;
  return (
    c === 32 || (c >= 9 && c <= 13) || c === 160 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff
  );
}

function admit(request: Request, principal: Principal | null, needed: Scope | null): void {
  if (!principal) throw new ApiError("invalid_api_key", "Invalid or revoked API key");
  principals.set(request, principal);
  if (needed && !hasScope(principal.scopes, needed)) throw new ApiError("insufficient_scope", `This key lacks the '${needed}' scope`);
}

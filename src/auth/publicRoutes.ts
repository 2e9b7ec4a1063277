// The one place that says which requests need no key (docs/CONTRACT.md §16): an explicit
// list. Everything else, under the API base or not, needs a valid key, so a
// route added anywhere is protected until it is put here, and a path that
// some layer reads differently from another still needs a key.

/** Exact paths answered without a key (GET and HEAD only). */
const PUBLIC_PATHS = new Set(["/healthz", "/", "/docs", "/docs/json"]);

/**
 * The console's and the docs page's files: one segment, a file name with an
 * extension the bundles use ("/chunk-2x8f….js", "/index-….css"). The route
 * serving them answers only the files it holds (src/console/routes.ts).
 */
const ASSET = /^\/[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(?:js|css|svg|png|ico|woff2?|map)$/;

export type PublicRoute = (method: string, path: string) => boolean;

/** `path` as routing reads it (src/http/path.ts: pathOf of a routable request). */
export function isPublic(method: string, path: string): boolean {
  if (method !== "GET" && method !== "HEAD") return false;
  return PUBLIC_PATHS.has(path) || ASSET.test(path);
}

// The web console (docs/CONTRACT.md §15): a static single-page app under client/, served
// at "/" by the server itself: no CDN, nothing fetched from elsewhere. The
// API reference at "/docs" (client/docs.html, docs/CONTRACT.md §16) is made and served
// the same way, under the same CSP, from the OpenAPI document at /docs/json.
//
// Embedding: client/index.html and client/docs.html are imported as HTML
// bundles. `bun build --compile` bundles them (and the TSX and CSS they
// reference) for the browser and puts the files inside the executable: each
// import then lists its files in `files`. Run from source (`npm start`, the
// tests) the import carries only the path of the HTML file, and the same
// bundle is made once, in memory, by Bun.build on the first request. Both
// ways the files are read once, gzipped once, and answered from memory.
//
// The bundle's names carry a content hash ("chunk-2x8f….js"), so they are
// cached for good; the pages are revalidated (ETag) on every load. Both
// pages' files are served from the root ("/chunk-….js"): one list of names.
import { Elysia } from "elysia";
import { basename, extname } from "node:path";
import type { HTMLBundle } from "bun";
import consolePage from "./client/index.html";
import docsPage from "./client/docs.html";
import { ApiError } from "../errors";

type Bytes = Uint8Array<ArrayBuffer>;

interface Asset {
  body: Bytes;
  gzip: Bytes;
  type: string;
  etag: string;
  immutable: boolean;
}

const TYPES: Record<string, string> = {
  ".html": "text/html;charset=utf-8",
  ".js": "text/javascript;charset=utf-8",
  ".css": "text/css;charset=utf-8",
  ".svg": "image/svg+xml",
};

/**
 * Only this origin, nothing inline: the key lives in sessionStorage, so no
 * script but the console's own may run on this origin's pages.
 */
const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};

const etagOf = (bytes: Bytes) => `"${Bun.hash(bytes).toString(36)}"`;

function asset(file: string, bytes: Bytes): Asset {
  return {
    body: bytes,
    gzip: Bun.gzipSync(bytes, { level: 9 }),
    type: TYPES[extname(file)] ?? "application/octet-stream",
    etag: etagOf(bytes),
    immutable: extname(file) !== ".html",
  };
}

/** Each page by the URL path it is served at; its other files go at "/<name>". */
const PAGES: readonly [path: string, bundle: HTMLBundle][] = [
  ["/", consolePage],
  ["/docs", docsPage],
];

/** The files of one page: compiled in, or built now from source. */
async function bundleFiles(bundle: HTMLBundle): Promise<{ path: string; bytes: Bytes }[]> {
  if (bundle.files?.length) {
    return Promise.all(bundle.files.map(async (f) => ({ path: f.path, bytes: new Uint8Array(await Bun.file(f.path).arrayBuffer()) })));
  }
  const built = await Bun.build({ entrypoints: [bundle.index], target: "browser", minify: true });
  if (!built.success) throw new AggregateError(built.logs, `building ${basename(bundle.index)} failed`);
  return Promise.all(built.outputs.map(async (o) => ({ path: o.path, bytes: new Uint8Array(await o.arrayBuffer()) })));
}

/** url path ("/" and "/docs" for the pages, "/chunk-….js" for the rest) → file. */
async function loadAssets(): Promise<Map<string, Asset>> {
  const out = new Map<string, Asset>();
  const html = new Map<string, Bytes>();
  const bundles = await Promise.all(PAGES.map(([, bundle]) => bundleFiles(bundle)));
  for (const [i, [pagePath]] of PAGES.entries()) {
    for (const f of bundles[i]!) {
      if (extname(f.path) === ".html") {
        html.set(pagePath, f.bytes);
        continue;
      }
      const name = "/" + basename(f.path);
      const seen = out.get(name);
      // Content-hashed names: the same name twice (a stylesheet both pages use) is the same file.
      if (seen && seen.etag !== etagOf(f.bytes)) throw new Error(`two different console files are named ${name}`);
      if (!seen) out.set(name, asset(f.path, f.bytes));
    }
  }
  // The compiled pages name their files from the root ("/chunk-…"), the ones
  // built from source relative to themselves ("./chunk-…"): make both
  // relative, so the pages also work under a path prefix (behind a reverse
  // proxy). "./chunk-…" from "/docs" is "/chunk-…" too.
  for (const [pagePath] of PAGES) {
    const bytes = html.get(pagePath);
    if (!bytes) throw new Error(`the console bundle has no page for ${pagePath}`);
    let text = new TextDecoder().decode(bytes);
    for (const name of out.keys()) text = text.replaceAll(`="${name}"`, `=".${name}"`);
    out.set(pagePath, asset("index.html", new TextEncoder().encode(text) as Bytes));
  }
  return out;
}

let assets: Promise<Map<string, Asset>> | null = null;

/** The console's and the docs page's files by URL path (built or read on first use). */
export function consoleAssets(): Promise<Map<string, Asset>> {
  assets ??= loadAssets().catch((e) => {
    assets = null; // a later request tries again
    throw e;
  });
  return assets;
}

async function answer(request: Request, path: string): Promise<Response> {
  const a = (await consoleAssets()).get(path);
  if (!a) throw new ApiError("not_found", `Unknown route: ${request.method} ${path.slice(0, 200)}`);
  const headers: Record<string, string> = {
    ...SECURITY_HEADERS,
    "content-type": a.type,
    etag: a.etag,
    vary: "accept-encoding",
    "cache-control": a.immutable ? "public, max-age=31536000, immutable" : "no-cache",
  };
  if (request.headers.get("if-none-match") === a.etag) return new Response(null, { status: 304, headers });
  if (/\bgzip\b/.test(request.headers.get("accept-encoding") ?? "")) {
    headers["content-encoding"] = "gzip";
    return new Response(a.gzip, { headers });
  }
  return new Response(a.body, { headers });
}

/**
 * GET / and GET /<file>. A one-segment path that is not one of the
 * console's files answers the same JSON 404 as any unknown route.
 */
export const consoleRoutes = () =>
  new Elysia()
    .get("/", ({ request }) => answer(request, "/"), { detail: { hide: true } })
    .get("/:asset", ({ request, params }) => answer(request, "/" + params.asset), { detail: { hide: true } });

/**
 * GET /docs: the API reference page (client/docs.html), which reads the
 * OpenAPI document at /docs/json. Its files are among the console's ("/<file>").
 */
export const docsRoutes = () => new Elysia().get("/docs", ({ request }) => answer(request, "/docs"), { detail: { hide: true } });

// The web console (SPEC §15): a static single-page app under client/, served
// at "/" by the server itself: no CDN, nothing fetched from elsewhere.
//
// Embedding: client/index.html is imported as an HTML bundle. `bun build
// --compile` bundles it (and the TSX and CSS it references) for the browser
// and puts the files inside the executable: the import then lists them in
// `files`. Run from source (`npm start`, the tests) the import carries only
// the path of index.html, and the same bundle is made once, in memory, by
// Bun.build on the first request. Both ways the files are read once, gzipped
// once, and answered from memory.
//
// The bundle's names carry a content hash ("chunk-2x8f….js"), so they are
// cached for good; index.html is revalidated (ETag) on every load.
import { Elysia } from "elysia";
import { basename, extname } from "node:path";
import page from "./client/index.html";
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

function asset(name: string, file: string, bytes: Bytes): Asset {
  return {
    body: bytes,
    gzip: Bun.gzipSync(bytes, { level: 9 }),
    type: TYPES[extname(file)] ?? "application/octet-stream",
    etag: `"${Bun.hash(bytes).toString(36)}"`,
    immutable: name !== "/",
  };
}

/** url path ("/" for index.html, "/chunk-….js" for the rest) → file. */
async function loadAssets(): Promise<Map<string, Asset>> {
  const out = new Map<string, Asset>();
  const add = (path: string, bytes: Bytes) => {
    const name = extname(path) === ".html" ? "/" : "/" + basename(path);
    out.set(name, asset(name, path, bytes));
  };
  if (page.files?.length) {
    for (const f of page.files) add(f.path, new Uint8Array(await Bun.file(f.path).arrayBuffer()));
  } else {
    const built = await Bun.build({ entrypoints: [page.index], target: "browser", minify: true });
    if (!built.success) throw new AggregateError(built.logs, "building the console failed");
    for (const o of built.outputs) add(o.path, new Uint8Array(await o.arrayBuffer()));
  }
  const index = out.get("/");
  if (!index) throw new Error("the console bundle has no index.html");
  // The compiled page names its files from the root ("/chunk-…"), the one
  // built from source relative to it ("./chunk-…"): make both relative, so
  // the console also works under a path prefix (behind a reverse proxy).
  let html = new TextDecoder().decode(index.body);
  for (const name of out.keys()) if (name !== "/") html = html.replaceAll(`="${name}"`, `=".${name}"`);
  out.set("/", asset("/", "index.html", new TextEncoder().encode(html) as Bytes));
  return out;
}

let assets: Promise<Map<string, Asset>> | null = null;

/** The console's files by URL path (built or read on first use). */
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

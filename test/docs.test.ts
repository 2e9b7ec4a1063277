// /docs (docs/CONTRACT.md §8, §16): the API reference is served wholly by the server,
// from files inside it, under the console's CSP, and reads the OpenAPI
// document at /docs/json; both need no key. A real server on port 0; the
// page itself in Debian's chromium (as test/console.test.ts) with every
// request to another origin refused.
//
// Without /usr/bin/chromium (or OFFPEAK_CHROMIUM) the browser part fails
// under CI (CI=true: .ci/run installs it) and is skipped elsewhere.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { buildApp } from "../src/app";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const CHROMIUM = process.env.OFFPEAK_CHROMIUM || "/usr/bin/chromium";
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const IN_CI = !!process.env.CI && process.env.CI !== "false" && process.env.CI !== "0";
/** As test/console.test.ts: no sandbox as root, no network but loopback. */
const CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

let t: TestServer;

beforeAll(async () => {
  t = await startTestServer();
  // From source the pages are bundled on the first request: not part of any test's timing.
  expect((await fetch(`${t.url}/docs`)).status).toBe(200);
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
});

/** The values of every src= and href= in a page. */
const references = (html: string) => [...html.matchAll(/\s(?:src|href)\s*=\s*["']?([^"'\s>]+)/gi)].map((m) => m[1]!);

/** URLs in a script or stylesheet that are not XML namespaces (which no browser fetches). */
const foreignUrls = (text: string) => [...text.matchAll(/(?:https?:)?\/\/[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s"'`)]*/g)].map((m) => m[0]).filter((u) => !/^http:\/\/www\.w3\.org\//.test(u));

describe("GET /docs", () => {
  test("a page from this server: no key, the console's CSP, nothing inline, nothing from another origin", async () => {
    const res = await fetch(`${t.url}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const csp = res.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("style-src 'self'");
    expect(csp).not.toContain("unsafe-inline");
    expect(csp).not.toMatch(/https?:|\*/);
    // The same policy as the console's page.
    expect(csp).toBe((await fetch(`${t.url}/`)).headers.get("content-security-policy")!);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");

    const html = await res.text();
    // Nothing the CSP would have to refuse: no inline script or style.
    expect(html).not.toMatch(/<style\b/i);
    expect(html).not.toMatch(/\sstyle\s*=/i);
    expect(html).not.toMatch(/\son[a-z]+\s*=/i);
    for (const m of html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)) {
      expect(m[1]).toMatch(/\ssrc=/);
      expect(m[2]!.trim()).toBe("");
    }
    // Every reference is to this server (relative) or a data: URI; none absolute.
    const refs = references(html);
    expect(refs.length).toBeGreaterThan(0);
    for (const r of refs) expect(r).toMatch(/^(?:data:|\.\/|\/(?!\/)|[A-Za-z0-9_-][^:]*$)/);
    expect(html.replace(/"data:[^"]*"/g, "")).not.toMatch(/https?:\/\//i);
  });

  test("its scripts and styles load from this server without a key, pinned (content-hashed, immutable), under the same CSP", async () => {
    const html = await (await fetch(`${t.url}/docs`)).text();
    const scripts = [...html.matchAll(/<script\b[^>]*\ssrc="([^"]+)"/gi)].map((m) => m[1]!);
    const styles = [...html.matchAll(/<link\b[^>]*rel="stylesheet"[^>]*href="([^"]+)"|<link\b[^>]*href="([^"]+)"[^>]*rel="stylesheet"/gi)].map((m) => (m[1] ?? m[2])!);
    expect(scripts.length).toBeGreaterThan(0);
    expect(styles.length).toBeGreaterThan(0);
    for (const ref of [...scripts, ...styles]) {
      const url = new URL(ref, `${t.url}/docs`);
      expect(url.origin).toBe(new URL(t.url).origin);
      // One segment under "/", like the console's files (what the public list of routes lets through).
      expect(url.pathname).toMatch(/^\/[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(?:js|css)$/);
      const res = await fetch(url);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(scripts.includes(ref) ? /javascript/ : /text\/css/);
      expect(res.headers.get("cache-control")).toContain("immutable");
      expect(res.headers.get("content-security-policy")).toContain("script-src 'self'");
      expect(foreignUrls(await res.text())).toEqual([]);
    }
  });

  test("GET /docs/json: the OpenAPI document, no key, listing every documented API route", async () => {
    const res = await fetch(`${t.url}/docs/json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/application\/json/);
    const doc = (await res.json()) as { openapi: string; info: { title: string }; paths: Record<string, Record<string, { summary?: string }>> };
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info.title).toBe("offpeak");
    expect(doc.paths["/api/v1/batches"]?.post?.summary).toBeTruthy();
    expect(doc.paths["/api/v1/batches"]?.get).toBeDefined();
    expect(doc.paths["/api/v1/files"]?.post).toBeDefined();
    expect(doc.paths["/api/v1/chat/completions"]?.post).toBeDefined();
    // Every route under the canonical base that is not hidden is in it; the /v1 copies, the pages and /healthz are not.
    const routes = buildApp(t.server.ctx).routes.filter((r) => r.path.startsWith("/api/v1/") && (r.hooks as { detail?: { hide?: boolean } } | undefined)?.detail?.hide !== true);
    expect(routes.length).toBeGreaterThan(20);
    for (const r of routes) {
      const path = r.path.replace(/:([^/]+)/g, "{$1}");
      expect(`${r.method} ${path}: ${!!doc.paths[path]?.[r.method.toLowerCase()]}`).toBe(`${r.method} ${path}: true`);
    }
    for (const p of Object.keys(doc.paths)) expect(p).toMatch(/^\/api\/v1\//);
  });
});

if (!HAVE_CHROMIUM) {
  const why = `docs browser test: no chromium at ${CHROMIUM} (apt-get install -y chromium, or set OFFPEAK_CHROMIUM)`;
  if (IN_CI) {
    test("chromium is installed (CI)", () => {
      throw new Error(why);
    });
  } else console.warn(`SKIPPED ${why}`);
}

(HAVE_CHROMIUM ? describe : describe.skip)("/docs in chromium", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  }, SCENARIO_MS);
  afterAll(async () => {
    await browser?.close();
  });

  test("renders every operation with its parameters and bodies, offline, with no CSP violation", async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const origin = new URL(t.url).origin;
      const foreign: string[] = [];
      // Offline: anything for another origin is refused, as it would be with no network.
      await ctx.route("**/*", (route) => {
        const url = route.request().url();
        if (url.startsWith(origin) || url.startsWith("data:")) return route.continue();
        foreign.push(url);
        return route.abort("internetdisconnected");
      });
      const page = await ctx.newPage();
      page.setDefaultTimeout(15_000);
      const problems: string[] = [];
      page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
      page.on("console", (m) => {
        if (m.type() === "error") problems.push(`console: ${m.text()}`);
      });
      // Anything the CSP refuses (an inline style, a script from elsewhere) shows as a console error.
      await page.addInitScript({ content: `addEventListener("securitypolicyviolation", (e) => console.error("CSP violation: " + e.violatedDirective + " " + e.blockedURI));` });
      const loaded: string[] = [];
      page.on("response", (r) => loaded.push(`${r.status()} ${r.url()}`));

      await page.goto(`${t.url}/docs`);
      const create = page.getByRole("article", { name: "POST /api/v1/batches", exact: true });
      await create.waitFor();
      await create.getByText("Create a batch from an uploaded JSONL file").waitFor();
      // The request body's fields, with which are required.
      await create.getByText("input_file_id").first().waitFor();
      await create.getByText("completion_window").first().waitFor();
      expect(await create.getByText("required").count()).toBeGreaterThan(0);
      // A path parameter and a response's fields.
      const retrieve = page.getByRole("article", { name: "GET /api/v1/files/{id}", exact: true });
      await retrieve.getByRole("cell", { name: "path" }).waitFor();
      await retrieve.getByText("status_details").waitFor();
      // Every operation of the document is on the page.
      const doc = (await (await fetch(`${t.url}/docs/json`)).json()) as { paths: Record<string, Record<string, unknown>> };
      const ops = Object.values(doc.paths).reduce((n, item) => n + Object.keys(item).length, 0);
      expect(await page.getByRole("article").count()).toBe(ops);
      // The filter narrows the list.
      await page.getByLabel("Filter").fill("webhook_endpoints");
      await page.getByRole("article", { name: "POST /api/v1/batches", exact: true }).waitFor({ state: "detached" });
      expect(await page.getByRole("article").count()).toBe(Object.keys(doc.paths).filter((p) => p.includes("webhook_endpoints")).reduce((n, p) => n + Object.keys(doc.paths[p]!).length, 0));

      expect(foreign).toEqual([]);
      expect(problems).toEqual([]);
      expect(loaded.every((l) => l.startsWith("200 ") && l.includes(origin))).toBe(true);
      expect(loaded.some((l) => l.endsWith("/docs/json"))).toBe(true);
    } finally {
      await ctx.close();
    }
  }, SCENARIO_MS);
});

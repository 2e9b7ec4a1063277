// docs/CONTRACT.md §16: authentication fails closed. Every route of the app's own route
// table (read from the app, so a route added later is covered without
// editing this file) is asked as an attacker would: with no key, with a key
// that lacks the route's scope, through hostile request targets and Host
// headers written byte for byte on a socket. None may answer 2xx, and
// nothing stored may change.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { buildHandler } from "../src/app";
import { routeScope } from "../src/auth/routeScopes";
import { isPublic } from "../src/auth/publicRoutes";
import { pathOf, routable } from "../src/http/path";
import { Elysia } from "elysia";
import { ADMIN_KEY, chatLine, startTestServer, storedBlobs, uploadRaw, type TestServer } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

let t: TestServer;
let port: number;
let userKey: string; // every scope but admin, project "default"
let inferenceKey: string; // inference only
let fileId: string;
let batchId: string;
let userKeyId: string;

/** One HTTP/1.x exchange written as raw bytes: the status code (0: no answer) and the body. */
async function raw(head: string, body = ""): Promise<{ status: number; text: string }> {
  let got = "";
  let done!: () => void;
  const closed = new Promise<void>((r) => (done = r));
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: { data: (_s, d) => void (got += d.toString("latin1")), close: () => done(), error: () => done() },
  });
  socket.write(head + body);
  await Promise.race([closed, Bun.sleep(5000)]);
  socket.end();
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(got);
  return { status: m ? Number(m[1]) : 0, text: got };
}

const request = (method: string, target: string, host: string | null, headers: Record<string, string>, body: string, version = "1.1") => {
  let head = `${method} ${target} HTTP/${version}\r\n`;
  if (host !== null) head += `Host: ${host}\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  head += `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
  return raw(head, body);
};

/**
 * The ways of writing one path that some layer might read as another:
 * `[target, Host]` pairs. For one- to three-character hosts, the prefix puts
 * the path's first "/" where a router reading from a fixed offset would
 * start (the trick that minted admin keys).
 */
function hostileForms(path: string): [string, string | null][] {
  const local = `127.0.0.1:${port}`;
  const forms: [string, string | null][] = [[path, local]];
  for (const host of ["x", "ab", "abc", "a:1"]) forms.push(["/" + "a".repeat(Math.max(0, 3 - host.length)) + path, host], [path, host]);
  forms.push([path, null], [path, ""], [path, "a/b"], [path, "u@h"], [path, "a?b"], [path, " "]);
  forms.push([`http://x/aa${path}`, "x"], [`http://evil.example${path}`, local], [`http://x${path}`, "x"]);
  forms.push(["/aa" + path, local], ["/healthz/.." + path, local], ["/docs/.." + path, local], ["/x/../" + path.slice(1), local]);
  forms.push(["/" + path, local], [path.replace("/v1/", "//v1/"), local], [path.replace(/\/([^/]*)$/, "//$1"), local], [path + "/", local], [path + "//", local]);
  forms.push([path.replace(/\/([^/]*)$/, "/./$1"), local], [path.replace(/\/([^/]*)$/, "/x/../$1"), local], [path.replace(/\/([^/]*)$/, "/%2e/$1"), local], [path.replace(/\/([^/]*)$/, "/x/%2e%2e/$1"), local]);
  forms.push([path.replace("/v1/", "/%76%31/"), local], [path.replace(/^\/(api\/)?v1\/(.)/, (_m, a, c) => `/${a ?? ""}v1/%${c.charCodeAt(0).toString(16)}`), local]);
  forms.push([path.replace("/v1/", "/V1/"), local], [path.replace(/\//g, "\\"), local], [path + "%00", local], [path + "?x=/healthz", local], [path + "#/healthz", local]);
  return forms;
}

/** A concrete path for a route pattern, with ids of things that exist (so a bypass would find them). */
function concrete(pattern: string): string {
  return pattern
    .replace(/\/files\/:[A-Za-z_]+/, `/files/${fileId}`)
    .replace(/\/batches\/:[A-Za-z_]+/, `/batches/${batchId}`)
    .replace(/\/keys\/:[A-Za-z_]+/, `/keys/${userKeyId}`)
    .replace(/:[A-Za-z_]+/g, "x0000000000000000000000000")
    .replace(/\*$/, "offpeak-echo");
}

/** A body that would work if the request got through, so that a bypass changes something. */
function bodyFor(path: string): string {
  if (path.endsWith("/keys")) return JSON.stringify({ name: "pwned", scopes: ["admin"] });
  if (path.endsWith("/batches")) return JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" });
  if (path.endsWith("/webhook_endpoints")) return JSON.stringify({ url: "https://example.com/hook" });
  if (path.endsWith("/chats")) return JSON.stringify({ model: "offpeak-echo" });
  return JSON.stringify({ model: "offpeak-echo", messages: [{ role: "user", content: "hi" }], input: "hi", prompt: "hi" });
}

/** Everything a successful hostile request could have changed, read with the admin key. */
async function snapshot(): Promise<string> {
  const read = async (p: string) => (await t.api(p)).text();
  const parts = await Promise.all(["/keys", "/files?limit=100", "/batches?limit=100", "/webhook_endpoints", "/chats"].map(read));
  return JSON.stringify([...parts, await storedBlobs(t)]).replace(/"(last_used_at|request_counts|in_progress_at|finalizing_at|completed_at|output_file_id|status)":[^,}]*/g, "");
}

let routes: { method: string; path: string }[];

beforeAll(async () => {
  t = await startTestServer();
  port = t.server.port;
  routes = buildHandler(t.server.ctx).routes.map((r) => ({ method: r.method.toUpperCase(), path: r.path }));
  const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "user" }) });
  const created = (await res.json()) as { id: string; key: string };
  userKey = created.key;
  userKeyId = created.id;
  inferenceKey = await t.createKey({ name: "inference only", scopes: ["inference"] });
  const up = (await (await uploadRaw(t, chatLine("a") + "\n")).json()) as { id: string };
  fileId = up.id;
  const b = await t.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: bodyFor("/batches") });
  batchId = ((await b.json()) as { id: string }).id;
  // Let the batch end so that the snapshot does not move by itself.
  for (let i = 0; i < 200; i++) {
    const s = ((await (await t.api(`/batches/${batchId}`)).json()) as { status: string }).status;
    if (["completed", "failed", "expired", "cancelled"].includes(s)) break;
    await Bun.sleep(50);
  }
});
afterAll(() => t?.stop());

describe("the route table", () => {
  test("is read from the app and covers both mounts", () => {
    const paths = new Set(routes.map((r) => r.path));
    expect(paths.has("/api/v1/keys")).toBe(true);
    expect(paths.has("/v1/keys")).toBe(true);
    expect(routes.length).toBeGreaterThan(40);
  });

  test("only the explicit public list is public", () => {
    const open = routes.filter((r) => isPublic(r.method, concrete(r.path))).map((r) => `${r.method} ${r.path}`);
    for (const r of open) expect(r).toMatch(/^(GET|HEAD) \/(healthz|docs|docs\/json|:asset)?$/);
  });
});

describe("no key, hostile targets: never 2xx, nothing changes", () => {
  test("every protected route, every form", async () => {
    const before = await snapshot();
    const leaks: string[] = [];
    for (const r of routes) {
      const path = concrete(r.path);
      if (isPublic(r.method, path)) continue;
      const method = r.method === "ALL" ? "POST" : r.method;
      const body = method === "GET" || method === "HEAD" || method === "DELETE" ? "" : bodyFor(path);
      for (const [target, host] of hostileForms(path)) {
        const res = await request(method, target, host, { "content-type": "application/json" }, body);
        if (res.status >= 200 && res.status < 300) leaks.push(`${method} ${target} Host=${JSON.stringify(host)} → ${res.status} ${res.text.slice(-200)}`);
      }
      // HTTP/1.0 without a Host header
      const res = await request(method, path, null, { "content-type": "application/json" }, body, "1.0");
      if (res.status >= 200 && res.status < 300) leaks.push(`${method} ${path} HTTP/1.0 → ${res.status}`);
    }
    expect(leaks).toEqual([]);
    expect(await snapshot()).toBe(before);
  }, SCENARIO_MS);
});

describe("a key without the route's scope, hostile targets: never 2xx, nothing changes", () => {
  test("admin routes with an every-scope-but-admin key, the rest with an inference-only key", async () => {
    const before = await snapshot();
    const leaks: string[] = [];
    for (const r of routes) {
      const path = concrete(r.path);
      const base = /^\/(api\/)?v1/.exec(path)?.[0];
      if (!base) continue;
      const method = r.method === "ALL" ? "POST" : r.method;
      const needed = routeScope(method, path.slice(base.length));
      if (needed === null || needed === "inference") continue;
      const key = needed === "admin" ? userKey : inferenceKey;
      const body = method === "GET" || method === "HEAD" || method === "DELETE" ? "" : bodyFor(path);
      for (const [target, host] of hostileForms(path)) {
        const res = await request(method, target, host, { "content-type": "application/json", authorization: `Bearer ${key}` }, body);
        if (res.status >= 200 && res.status < 300) leaks.push(`${method} ${target} Host=${JSON.stringify(host)} (${needed}) → ${res.status} ${res.text.slice(-200)}`);
      }
    }
    expect(leaks).toEqual([]);
    expect(await snapshot()).toBe(before);
  }, SCENARIO_MS);

  test("the admin key still gets through the plain form (the test can tell a pass from a refusal)", async () => {
    const res = await request("GET", "/api/v1/keys", `127.0.0.1:${port}`, { authorization: `Bearer ${ADMIN_KEY}` }, "");
    expect(res.status).toBe(200);
    const odd = await request("GET", "/aa/api/v1/keys", "x", { authorization: `Bearer ${ADMIN_KEY}` }, "");
    expect(odd.status).not.toBe(200); // /aa/api/v1/keys is no route: an admin gets its 404, not the keys
    const short = await request("GET", "/api/v1/keys", "x", { authorization: `Bearer ${ADMIN_KEY}` }, "");
    expect(short.status).toBe(200); // a short Host is odd, not refused: the request is read as sent
  });

  test("public routes answer without a key", async () => {
    expect((await request("GET", "/healthz", "x", {}, "")).status).toBe(200);
    expect((await request("GET", "/healthz", null, {}, "", "1.0")).status).toBe(200);
    expect((await request("GET", "/docs/json", `127.0.0.1:${port}`, {}, "")).status).toBe(200);
  });

  test("an unknown path outside the API base needs a key too (fail closed)", async () => {
    expect((await request("GET", "/nope/api/v1/keys", `127.0.0.1:${port}`, {}, "")).status).toBe(401);
    expect((await request("POST", "/healthz", `127.0.0.1:${port}`, {}, "")).status).toBe(401);
    expect((await request("GET", "/nope", `127.0.0.1:${port}`, { authorization: `Bearer ${userKey}` }, "")).status).toBe(404);
  });
});

describe("routing and the key check read the same path", () => {
  // The router's own reading, asked directly: a catch-all Elysia app echoes the path it routed.
  const echo = new Elysia().get("/*", ({ path }) => path);
  const urls = ["http://x/aa/api/v1/keys", "http://ab/a/api/v1/keys", "http://abc//api/v1/keys", "http://a:1/a/v1/keys", "http://x", "https://x/a/v1", "http://offpeak.invalid/api/v1/keys?x=/y"];
  for (const url of urls) {
    test(`${url}`, async () => {
      const request = routable(new Request(url));
      const seen = await (await echo.handle(request)).text();
      expect(seen).toBe(pathOf(request.url));
    });
  }

  test("pathOf reads a bare target (no Host) from its first character", () => {
    expect(pathOf("/api/v1/keys")).toBe("/api/v1/keys");
    expect(pathOf("/api/v1/keys?x=1")).toBe("/api/v1/keys");
    expect(pathOf("http://x/aa/api/v1/keys")).toBe("/aa/api/v1/keys");
    expect(pathOf("http://x")).toBe("/");
  });
});

describe("the matched-route check holds by itself", () => {
  test("with every path taken for public by the first check, no API route answers without a key", async () => {
    const everythingPublic = buildHandler(t.server.ctx, () => true);
    const before = await snapshot();
    const leaks: string[] = [];
    for (const r of routes) {
      const path = concrete(r.path);
      if (!/^\/(api\/)?v1(\/|$)/.test(path)) continue;
      const method = r.method === "ALL" ? "POST" : r.method;
      const body = method === "GET" || method === "HEAD" || method === "DELETE" ? undefined : bodyFor(path);
      const res = await everythingPublic.fetch(new Request(`http://localhost${path}`, { method, body, headers: { "content-type": "application/json" } }));
      // A body the route's schema refuses is answered (400) before any handler hook runs: nothing ran.
      if (res.status !== 401 && !(res.status === 400 && body)) leaks.push(`${method} ${path} → ${res.status}`);
    }
    expect(leaks).toEqual([]);
    for (const path of ["/api/v1/keys", "/v1/metrics", "/api/v1/webhook_endpoints", "/api/v1/status"]) {
      expect((await everythingPublic.fetch(new Request(`http://localhost${path}`))).status).toBe(401);
    }
    expect(await snapshot()).toBe(before);
  });
});

// docs/CONTRACT.md §2, §3, §10 on every batch route: 401 without a valid key (also a
// revoked key, or a key in the query string), 403 without the scope, 404 for
// another project's batch exactly as for an unknown id, and 404 for path ids
// full of junk.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ADMIN_KEY, chatLine, startTestServer, uploadRaw, type TestServer } from "./helpers/server";
import { waitBatch } from "./helpers/batches";

const json = (res: Response): Promise<any> => res.json();

let t: TestServer;
let fileId: string;
/** A finished batch of project "default". */
let batchId: string;
const UNKNOWN_BATCH = "batch_AAAAAAAAAAAAAAAAAAAAAAAA";

interface Route {
  name: string;
  method: "GET" | "POST";
  path: (id: string) => string;
  scope: "batches:read" | "batches:write";
  body?: () => string;
}

const ROUTES: Route[] = [
  {
    name: "POST /batches",
    method: "POST",
    path: () => "/batches",
    scope: "batches:write",
    body: () => JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  },
  { name: "GET /batches", method: "GET", path: () => "/batches", scope: "batches:read" },
  { name: "GET /batches/:id", method: "GET", path: (id) => `/batches/${id}`, scope: "batches:read" },
  { name: "POST /batches/:id/cancel", method: "POST", path: (id) => `/batches/${id}/cancel`, scope: "batches:write" },
];

function call(r: Route, opts: { key?: string | null; headers?: Record<string, string>; query?: string; id?: string; base?: string } = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  if (r.body) headers["content-type"] = "application/json";
  const path = r.path(opts.id ?? batchId) + (opts.query ?? "");
  if (opts.base) {
    if (opts.key) headers.authorization = `Bearer ${opts.key}`;
    return fetch(`${t.url}${opts.base}${path}`, { method: r.method, headers, body: r.body?.() });
  }
  return t.api(path, { method: r.method, headers, body: r.body?.(), key: opts.key === undefined ? ADMIN_KEY : opts.key });
}

async function expect401(res: Response, what: string) {
  expect({ what, status: res.status }).toEqual({ what, status: 401 });
  expect(res.headers.get("www-authenticate") ?? "").toMatch(/^Bearer/);
  expect(res.headers.get("content-type") ?? "").toContain("application/json");
  expect(res.headers.get("x-request-id")).toBeTruthy();
  const body = await json(res);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error.type).toBe("authentication_error");
  expect(body.error.code).toBe("invalid_api_key");
}

async function expectStatus(res: Response, status: number, type: string, what: string) {
  expect({ what, status: res.status }).toEqual({ what, status });
  expect(res.headers.get("content-type") ?? "").toContain("application/json");
  const body = await json(res);
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect({ what, type: body.error.type }).toEqual({ what, type });
  return body;
}

async function batchCount(): Promise<number> {
  return (await json(await t.api("/batches?limit=100"))).data.length;
}

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  const up = await uploadRaw(t, chatLine("a") + "\n" + chatLine("b") + "\n");
  expect(up.status).toBe(200);
  fileId = (await json(up)).id;
  const b = await t.sdk().batches.create({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" });
  batchId = b.id;
  await waitBatch(t.sdk(), batchId);
});
afterAll(async () => {
  await t?.stop();
});

describe("401", () => {
  test("no key, a wrong key, an unknown well-formed key, a malformed header → 401 on every route, and nothing is created", async () => {
    const before = await batchCount();
    const fakeKey = "sk-op-" + "Z".repeat(40);
    const cases: [string, { key?: string | null; headers?: Record<string, string> }][] = [
      ["no key", { key: null }],
      ["wrong key", { key: "wrong" }],
      ["unknown well-formed key", { key: fakeKey }],
      ["admin key with a typo", { key: ADMIN_KEY.slice(0, -1) + "X" }],
      ["Basic scheme", { key: null, headers: { authorization: `Basic ${btoa(`user:${ADMIN_KEY}`)}` } }],
      ["Bearer without a key", { key: null, headers: { authorization: "Bearer " } }],
      ["the key without a scheme", { key: null, headers: { authorization: ADMIN_KEY } }],
      ["two keys", { key: null, headers: { authorization: `Bearer ${ADMIN_KEY} ${ADMIN_KEY}` } }],
      // x-api-key is accepted (docs/CONTRACT.md §22, Anthropic's SDKs): a wrong key there is still 401.
      ["a wrong key in x-api-key", { key: null, headers: { "x-api-key": "sk-op-wrong-key-00000000000000000000000" } }],
    ];
    for (const r of ROUTES) for (const [what, opts] of cases) await expect401(await call(r, opts), `${r.name}: ${what}`);
    // Also under the /v1 mount.
    for (const r of ROUTES) await expect401(await call(r, { base: "/v1", key: null }), `/v1 ${r.name}: no key`);
    expect(await batchCount()).toBe(before);
  });

  test("a key in the query string instead of the header → 401", async () => {
    const before = await batchCount();
    for (const r of ROUTES)
      for (const q of [`?api_key=${ADMIN_KEY}`, `?key=${ADMIN_KEY}`, `?access_token=${ADMIN_KEY}`, `?authorization=Bearer%20${ADMIN_KEY}`])
        await expect401(await call(r, { key: null, query: q }), `${r.name} ${q.split("=")[0]}`);
    expect(await batchCount()).toBe(before);
  });

  test("a revoked key → 401 on every route, at once", async () => {
    const created = await json(
      await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "to-revoke" }) }),
    );
    // It works before…
    for (const r of ROUTES.filter((r) => r.method === "GET")) expect((await call(r, { key: created.key })).status).toBe(200);
    const del = await t.api(`/keys/${created.id}`, { method: "DELETE" });
    expect(del.status).toBe(200);
    // …and not after.
    const before = await batchCount();
    for (const r of ROUTES) await expect401(await call(r, { key: created.key }), `${r.name}: revoked`);
    expect(await batchCount()).toBe(before);
  });

  test("junk ids without a key are still 401 (authentication comes first)", async () => {
    for (const r of ROUTES.filter((r) => r.path("X") !== r.path("Y"))) await expect401(await call(r, { key: null, id: "%2e%2e" }), r.name);
  });
});

describe("403", () => {
  test("a key without batches:read or batches:write → 403 on every route, nothing created", async () => {
    const before = await batchCount();
    for (const scopes of [["files:read", "files:write", "inference"], ["files:read"], ["inference"]]) {
      const key = await t.createKey({ name: "no-batches", scopes });
      for (const r of ROUTES) {
        const body = await expectStatus(await call(r, { key }), 403, "permission_error", `${r.name} with ${scopes.join(",")}`);
        expect(body.error.code).toBe("insufficient_scope");
      }
    }
    expect(await batchCount()).toBe(before);
  });

  test("batches:read alone may read but not create or cancel", async () => {
    const key = await t.createKey({ name: "reader", scopes: ["batches:read"] });
    for (const r of ROUTES) {
      const res = await call(r, { key });
      if (r.scope === "batches:read") {
        expect({ r: r.name, status: res.status }).toEqual({ r: r.name, status: 200 });
      } else {
        await expectStatus(res, 403, "permission_error", r.name);
      }
    }
    // The scope is checked before the id: a reader cancelling an unknown batch is refused for the scope.
    await expectStatus(await call(ROUTES[3]!, { key, id: UNKNOWN_BATCH }), 403, "permission_error", "cancel unknown");
  });

  test("batches:write alone may create and cancel but not read", async () => {
    const key = await t.createKey({ name: "writer", scopes: ["batches:write"] });
    for (const r of ROUTES) {
      const res = await call(r, { key });
      if (r.scope === "batches:write") {
        // Past authorization: create → 200; cancel of the finished batch → 409.
        expect({ r: r.name, status: res.status }).toEqual({ r: r.name, status: r.name === "POST /batches" ? 200 : 409 });
        if (r.name === "POST /batches") await waitBatch(t.sdk(), (await json(res)).id);
      } else {
        await expectStatus(res, 403, "permission_error", r.name);
      }
    }
  });
});

describe("404 across projects", () => {
  let otherKey: string;
  beforeAll(async () => {
    otherKey = await t.createKey({ name: "other", project: "other" });
  });

  test("another project's batch id answers 404 exactly like an unknown id (retrieve and cancel)", async () => {
    for (const r of ROUTES.filter((r) => r.path("X") !== r.path("Y"))) {
      const theirs = await expectStatus(await call(r, { key: otherKey, id: batchId }), 404, "not_found_error", `${r.name} foreign`);
      const unknown = await expectStatus(await call(r, { key: otherKey, id: UNKNOWN_BATCH }), 404, "not_found_error", `${r.name} unknown`);
      expect(theirs.error.code).toBe(unknown.error.code);
      expect(theirs.error.param).toBe(unknown.error.param);
      expect(theirs.error.message.replace(batchId, "ID")).toBe(unknown.error.message.replace(UNKNOWN_BATCH, "ID"));
    }
    // The foreign cancel changed nothing.
    const mine = await json(await t.api(`/batches/${batchId}`));
    expect(mine.status).toBe("completed");
    expect(mine.cancelling_at).toBeNull();
  });

  test("another project's batches are not listed, and a foreign id as cursor is refused like an unknown one", async () => {
    const list = await json(await call(ROUTES[1]!, { key: otherKey }));
    expect(list.data.map((b: any) => b.id)).not.toContain(batchId);
    const foreign = await call(ROUTES[1]!, { key: otherKey, query: `?after=${batchId}` });
    const unknown = await call(ROUTES[1]!, { key: otherKey, query: `?after=${UNKNOWN_BATCH}` });
    expect(foreign.status).toBe(unknown.status);
    expect(foreign.status).toBeGreaterThanOrEqual(400);
    expect(foreign.status).toBeLessThan(500);
    for (const q of ["?after=%FF", "?after=%00", "?after=..%2F", `?after=${"x".repeat(5000)}`]) {
      const res = await call(ROUTES[1]!, { key: otherKey, query: q });
      expect({ q: q.slice(0, 20), status: res.status }).toEqual({ q: q.slice(0, 20), status: 400 });
    }
  });

  test("another project's input file → 404 on POST /batches", async () => {
    const res = await t.api("/batches", {
      method: "POST",
      key: otherKey,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    });
    const body = await expectStatus(res, 404, "not_found_error", "foreign file");
    expect(body.error.param).toBe("input_file_id");
    expect((await json(await call(ROUTES[1]!, { key: otherKey }))).data).toEqual([]);
  });
});

describe("junk path ids → 404", () => {
  const JUNK = [
    "nope",
    UNKNOWN_BATCH,
    "batch_AAAAAAAAAAAAAAAAAAAAAAA", // 23 characters
    "batch_AAAAAAAAAAAAAAAAAAAAAAAAA", // 25
    "file-AAAAAAAAAAAAAAAAAAAAAAAA",
    "..",
    "%2e%2e",
    "%2E%2E%2F%2E%2E",
    "%2F",
    "..%2F..%2Ffiles",
    `${UNKNOWN_BATCH}%2F..`,
    "%00",
    `batch_AAAAAAAAAAAAAAAAAAAAAA%00A`,
    "%20",
    "batch_%3Cscript%3E",
    "'%20OR%201=1--",
    "x".repeat(10_000),
  ];

  for (const r of ROUTES.filter((r) => r.path("X") !== r.path("Y")))
    test(`${r.name}`, async () => {
      for (const id of JUNK) {
        const body = await expectStatus(await call(r, { id }), 404, "not_found_error", `${r.name} ${id.slice(0, 40)}`);
        expect(body.error.message.length).toBeLessThan(400);
      }
      expect((await json(await t.api(`/batches/${batchId}`))).status).toBe("completed");
    });

  // A path id that is not valid percent-encoding (%FF, a cut-off %E0%A4%A)
  // reaches the handler as null (Elysia's decoding); it was a 500 (TypeError
  // in isId) until getBatch checked for a string.
  for (const r of ROUTES.filter((r) => r.path("X") !== r.path("Y")))
    test(`${r.name} with invalid percent-encoding`, async () => {
      for (const id of ["%FF", "%E0%A4%A", "batch_%C0%AF"]) await expectStatus(await call(r, { id }), 404, "not_found_error", `${r.name} ${id}`);
    });
});

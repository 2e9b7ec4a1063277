// docs/CONTRACT.md §2: 401 / 403 / 404 on every files and keys route, projects as
// isolation boundaries, and how keys are made, shown, stored and revoked.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { bearerSecret } from "../src/auth/plugin";
import { ADMIN_KEY, chatLine, startTestServer, storedBlobs, uploadRaw, type TestServer } from "./helpers/server";

/** Response.json() typed loosely, for assertions. */
const json = (res: Response): Promise<any> => res.json();

let t: TestServer;
/** A file in project "default" and a live key, used as :id targets. */
let fileId: string;
let victimKeyId: string;
let victimKey: string;

const KEY_FORMAT = /^sk-op-[0-9A-Za-z]{40}$/;
const KEY_ID = /^key_[0-9A-Za-z]{24}$/;
const ALL_BUT_ADMIN = ["batches:read", "batches:write", "files:read", "files:write", "inference"];

beforeAll(async () => {
  t = await startTestServer();
  const up = await uploadRaw(t, chatLine("a") + "\n");
  expect(up.status).toBe(200);
  fileId = (await json(up)).id;
  const k = await createKeyFull({ name: "victim" });
  victimKeyId = k.id;
  victimKey = k.key;
});
afterAll(async () => {
  await t?.stop();
});

async function createKeyFull(body: Record<string, unknown>): Promise<any> {
  const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`POST /keys: ${res.status} ${text}`);
  return JSON.parse(text);
}

const randomBase62 = (n: number) => {
  const a = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  return Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => a[b % 62]).join("");
};

interface Route {
  method: string;
  /** Path under the base; :file and :key are replaced by live ids. */
  path: string;
  scope: string;
  body?: () => { body: FormData | string; headers?: Record<string, string> };
}

const ROUTES: Route[] = [
  {
    method: "POST",
    path: "/files",
    scope: "files:write",
    body: () => {
      const form = new FormData();
      form.append("purpose", "batch");
      form.append("file", new Blob([chatLine("auth-" + randomBase62(8)) + "\n"]), "auth.jsonl");
      return { body: form };
    },
  },
  { method: "GET", path: "/files", scope: "files:read" },
  { method: "GET", path: "/files/:file", scope: "files:read" },
  { method: "GET", path: "/files/:file/content", scope: "files:read" },
  { method: "DELETE", path: "/files/:file", scope: "files:write" },
  { method: "POST", path: "/keys", scope: "admin", body: () => ({ body: JSON.stringify({ name: "made-in-auth-test" }), headers: { "content-type": "application/json" } }) },
  { method: "GET", path: "/keys", scope: "admin" },
  { method: "DELETE", path: "/keys/:key", scope: "admin" },
];

const BASES = ["/api/v1", "/v1"];

/** Sends `route` with exactly these headers (no default key) and an optional query string. */
function send(route: Route, base: string, headers: Record<string, string>, query = ""): Promise<Response> {
  const path = route.path.replace(":file", fileId).replace(":key", victimKeyId);
  const b = route.body?.();
  return fetch(`${t.url}${base}${path}${query}`, { method: route.method, body: b?.body, headers: { ...b?.headers, ...headers } });
}

const label = (r: Route, base: string) => `${r.method} ${base}${r.path}`;

/** Checks a 401 answer completely; returns a problem description or null. */
async function problemWith401(res: Response): Promise<string | null> {
  const text = await res.text();
  if (res.status !== 401) return `status ${res.status}: ${text.slice(0, 200)}`;
  const www = res.headers.get("www-authenticate");
  if (!www || !/^Bearer\b/.test(www)) return `WWW-Authenticate: ${www}`;
  if (!res.headers.get("content-type")?.startsWith("application/json")) return `content-type ${res.headers.get("content-type")}`;
  if (!res.headers.get("x-request-id")) return "no x-request-id";
  const body = JSON.parse(text);
  if (JSON.stringify(Object.keys(body)) !== '["error"]') return `body keys ${Object.keys(body)}`;
  const e = body.error;
  if (JSON.stringify(Object.keys(e).sort()) !== '["code","message","param","type"]') return `error keys ${Object.keys(e)}`;
  if (e.type !== "authentication_error" || e.code !== "invalid_api_key" || typeof e.message !== "string") return `error ${JSON.stringify(e)}`;
  return null;
}

async function expectAll401(headers: () => Record<string, string>, query = "") {
  const problems: string[] = [];
  for (const base of BASES) {
    for (const route of ROUTES) {
      const p = await problemWith401(await send(route, base, headers(), query));
      if (p) problems.push(`${label(route, base)}${query}: ${p}`);
    }
  }
  expect(problems).toEqual([]);
}

/** Nothing the rejected requests touched may have changed. */
async function expectUntouched() {
  const f = await t.api(`/files/${fileId}`);
  expect(f.status).toBe(200);
  const keys = (await json(await t.api("/keys"))).data as { id: string; name: string }[];
  expect(keys.map((k) => k.id)).toContain(victimKeyId);
  expect(keys.some((k) => k.name === "made-in-auth-test")).toBe(false);
  const files = (await json(await t.api("/files"))).data as { id: string }[];
  expect(files.map((x) => x.id)).toEqual([fileId]);
  expect((await t.api("/files", { key: victimKey })).status).toBe(200);
}

describe("401 on every route", () => {
  test("missing Authorization header → 401 with WWW-Authenticate: Bearer", async () => {
    await expectAll401(() => ({}));
    await expectUntouched();
  });

  test("malformed Authorization headers → 401", async () => {
    const variants = [
      `Basic ${btoa("user:" + ADMIN_KEY)}`,
      "Bearer",
      "Bearer ",
      `Token ${ADMIN_KEY}`,
      ADMIN_KEY,
      `Bearer ${ADMIN_KEY} extra`,
      `Bearer:${ADMIN_KEY}`,
      `BearerX ${ADMIN_KEY}`,
      "",
    ];
    for (const v of variants) await expectAll401(() => ({ authorization: v }));
    await expectUntouched();
  });

  test("unknown keys → 401 (random, near-miss of a real key, overlong)", async () => {
    for (const key of [`sk-op-${randomBase62(40)}`, victimKey.slice(0, -1), victimKey + "x", victimKey.toUpperCase(), ADMIN_KEY + "0", "x".repeat(2000)]) {
      await expectAll401(() => ({ authorization: `Bearer ${key}` }));
    }
    await expectUntouched();
  });

  test("a key only in the query string → 401", async () => {
    for (const param of ["access_token", "api_key", "key"]) {
      await expectAll401(() => ({}), `?${param}=${encodeURIComponent(ADMIN_KEY)}`);
      await expectAll401(() => ({}), `?${param}=${encodeURIComponent(victimKey)}`);
    }
    await expectUntouched();
  });

  test("unknown routes under the base also need a key", async () => {
    for (const base of BASES) {
      const p = await problemWith401(await fetch(`${t.url}${base}/nope`));
      expect(p).toBeNull();
    }
  });

  test("a revoked key stops working at once, on every route", async () => {
    const k = await createKeyFull({ name: "soon-revoked", scopes: ["admin"] });
    expect((await t.api("/files", { key: k.key })).status).toBe(200);
    expect((await t.api("/keys", { key: k.key })).status).toBe(200);
    const del = await t.api(`/keys/${k.id}`, { method: "DELETE" });
    expect(del.status).toBe(200);
    expect(await json(del)).toEqual({ id: k.id, object: "api_key", deleted: true });
    await expectAll401(() => ({ authorization: `Bearer ${k.key}` }));
    // Gone from the list; revoking again → 404.
    const list = (await json(await t.api("/keys"))).data as { id: string }[];
    expect(list.map((x) => x.id)).not.toContain(k.id);
    const again = await t.api(`/keys/${k.id}`, { method: "DELETE" });
    expect(again.status).toBe(404);
    expect((await json(again)).error.code).toBe("not_found");
    await expectUntouched();
  });

  test("the bearer scheme is case-insensitive and a valid key passes", async () => {
    expect((await t.api("/files", { key: null, headers: { authorization: `bearer ${victimKey}` } })).status).toBe(200);
    expect((await t.api("/files", { key: null, headers: { authorization: `BEARER ${victimKey}` } })).status).toBe(200);
  });

  test("/healthz needs no key", async () => {
    expect((await fetch(`${t.url}/healthz`)).status).toBe(200);
  });
});

describe("403 when the key lacks the scope", () => {
  async function statuses(key: string): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const base of BASES) {
      for (const route of ROUTES) {
        // Only read-only or forbidden requests are sent; the allowed writes are checked separately.
        const res = await send(route, base, { authorization: `Bearer ${key}` });
        out[label(route, base)] = res.status;
        if (res.status === 403) {
          expect(res.headers.get("www-authenticate")).toBeNull();
          const body = await json(res);
          expect(body).toEqual({ error: { message: expect.stringContaining(route.scope), type: "permission_error", param: null, code: "insufficient_scope" } });
        } else await res.arrayBuffer();
      }
    }
    return out;
  }

  function expected(allowed: (r: Route) => boolean, allowedStatus: (r: Route) => number): Record<string, number> {
    const out: Record<string, number> = {};
    for (const base of BASES) for (const r of ROUTES) out[label(r, base)] = allowed(r) ? allowedStatus(r) : 403;
    return out;
  }

  test("a key with no files or admin scope gets 403 everywhere", async () => {
    const key = await t.createKey({ name: "batches-only", scopes: ["batches:read", "batches:write", "inference"] });
    expect(await statuses(key)).toEqual(expected(() => false, () => 0));
    await expectUntouched();
  });

  test("files:read only: can list/retrieve/download, cannot upload/delete or manage keys", async () => {
    const key = await t.createKey({ name: "reader", scopes: ["files:read"] });
    expect(await statuses(key)).toEqual(expected((r) => r.scope === "files:read", () => 200));
    await expectUntouched();
  });

  test("files:write only: can upload/delete, cannot read", async () => {
    const key = await t.createKey({ name: "writer", scopes: ["files:write"] });
    const scratch = async () => {
      const up = await uploadRaw(t, chatLine("w") + "\n", "batch", "w.jsonl", key);
      expect(up.status).toBe(200);
      return (await json(up)).id as string;
    };
    const id = await scratch();
    expect((await t.api(`/files/${id}`, { key })).status).toBe(403);
    expect((await t.api(`/files/${id}/content`, { key })).status).toBe(403);
    expect((await t.api("/files", { key })).status).toBe(403);
    const del = await t.api(`/files/${id}`, { method: "DELETE", key });
    expect(del.status).toBe(200);
    expect((await t.api(`/files/${id}`)).status).toBe(404);
    expect((await t.api("/keys", { key })).status).toBe(403);
  });

  test("a key with default scopes (everything but admin) cannot manage keys", async () => {
    const key = await t.createKey({ name: "default-scopes" });
    for (const base of BASES) {
      for (const route of ROUTES.filter((r) => r.scope === "admin")) {
        const res = await send(route, base, { authorization: `Bearer ${key}` });
        expect({ route: label(route, base), status: res.status }).toEqual({ route: label(route, base), status: 403 });
        expect((await json(res)).error.code).toBe("insufficient_scope");
      }
    }
    expect((await t.api("/files", { key })).status).toBe(200);
    await expectUntouched();
  });

  test("a created admin key can manage keys", async () => {
    const key = await t.createKey({ name: "second-admin", scopes: ["admin"] });
    const res = await t.api("/keys", { method: "POST", key, headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "by-second-admin" }) });
    expect(res.status).toBe(200);
    const made = await json(res);
    expect((await t.api(`/keys/${made.id}`, { method: "DELETE", key })).status).toBe(200);
  });

  test("a rejected upload (403) stores nothing", async () => {
    const key = await t.createKey({ name: "reader2", scopes: ["files:read"] });
    const before = await storedBlobs(t);
    const res = await uploadRaw(t, chatLine("x") + "\n", "batch", "x.jsonl", key);
    expect(res.status).toBe(403);
    expect(await storedBlobs(t)).toEqual(before);
    expect(readdirSync(join(t.dataDir, "tmp"))).toEqual([]);
    await expectUntouched();
  });
});

describe("projects", () => {
  let otherKey: string;
  let otherFile: string;

  beforeAll(async () => {
    otherKey = (await createKeyFull({ name: "other-project", project: "other", scopes: ["files:read", "files:write"] })).key;
    const up = await uploadRaw(t, chatLine("o") + "\n", "batch", "other.jsonl", otherKey);
    expect(up.status).toBe(200);
    otherFile = (await json(up)).id;
  });

  /** The 404 for `id` with the id itself blanked out, to compare answers for different ids. */
  async function notFoundShape(res: Response, id: string) {
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toStartWith("application/json");
    expect(res.headers.get("www-authenticate")).toBeNull();
    const body = await json(res);
    return JSON.parse(JSON.stringify(body).split(id).join("<ID>"));
  }

  test("another project's file id answers 404 exactly like an unknown id", async () => {
    const unknown = "file-" + randomBase62(24);
    for (const [method, suffix] of [
      ["GET", ""],
      ["GET", "/content"],
      ["DELETE", ""],
    ] as const) {
      const foreign = await notFoundShape(await t.api(`/files/${otherFile}${suffix}`, { method, key: victimKey }), otherFile);
      const missing = await notFoundShape(await t.api(`/files/${unknown}${suffix}`, { method, key: victimKey }), unknown);
      expect(foreign).toEqual(missing);
      expect(foreign.error.type).toBe("not_found_error");
      expect(foreign.error.code).toBe("not_found");
      // The admin key of project default is no exception.
      const viaAdmin = await notFoundShape(await t.api(`/files/${otherFile}${suffix}`, { method }), otherFile);
      expect(viaAdmin).toEqual(missing);
      // And the other direction.
      const back = await notFoundShape(await t.api(`/files/${fileId}${suffix}`, { method, key: otherKey }), fileId);
      expect(back).toEqual(missing);
    }
    // Nothing was deleted by those DELETEs.
    expect((await t.api(`/files/${otherFile}`, { key: otherKey })).status).toBe(200);
    expect((await t.api(`/files/${fileId}`)).status).toBe(200);
  });

  test("listings are per project; a foreign id as cursor is refused like an unknown one", async () => {
    const mine = (await json(await t.api("/files", { key: otherKey }))).data.map((f: any) => f.id);
    expect(mine).toEqual([otherFile]);
    const theirs = (await json(await t.api("/files", { key: victimKey }))).data.map((f: any) => f.id);
    expect(theirs).not.toContain(otherFile);
    expect(theirs).toContain(fileId);

    const unknown = "file-" + randomBase62(24);
    const foreign = await t.api(`/files?after=${otherFile}`, { key: victimKey });
    const missing = await t.api(`/files?after=${unknown}`, { key: victimKey });
    expect(foreign.status).toBe(missing.status);
    const fb = JSON.stringify(await json(foreign)).split(otherFile).join("<ID>");
    const mb = JSON.stringify(await json(missing)).split(unknown).join("<ID>");
    expect(fb).toEqual(mb);
  });
});

describe("keys", () => {
  test("POST /keys returns the record with the secret, once; defaults", async () => {
    const k = await createKeyFull({ name: "fresh" });
    for (const f of ["id", "object", "name", "project", "scopes", "rate_limits", "created_at", "key"]) expect(k).toHaveProperty(f);
    expect(k.id).toMatch(KEY_ID);
    expect(k.object).toBe("api_key");
    expect(k.name).toBe("fresh");
    expect(k.project).toBe("default");
    expect([...k.scopes].sort()).toEqual(ALL_BUT_ADMIN);
    expect(k.rate_limits).toEqual({ rpm: null, tpm: null });
    expect(Number.isInteger(k.created_at)).toBe(true);
    expect(Math.abs(k.created_at - Date.now() / 1000)).toBeLessThan(120);
    expect(k.key).toMatch(KEY_FORMAT);
    // It works at once.
    expect((await t.api("/files", { key: k.key })).status).toBe(200);

    const list = await t.api("/keys");
    expect(list.status).toBe(200);
    const body = await json(list);
    expect(body.object).toBe("list");
    const entry = body.data.find((x: any) => x.id === k.id);
    expect(entry).toBeDefined();
    expect(entry).not.toHaveProperty("key");
    expect(entry.name).toBe("fresh");
    expect([...entry.scopes].sort()).toEqual(ALL_BUT_ADMIN);
    for (const e of body.data) expect(e).not.toHaveProperty("key");
    // No secret anywhere in the listing.
    const raw = JSON.stringify(body);
    expect(raw).not.toContain(k.key);
    expect(raw).not.toContain(victimKey);
  });

  test("explicit scopes, project and rate limits are kept", async () => {
    const k = await createKeyFull({ name: "custom", scopes: ["files:read", "inference"], project: "team-a", rate_limits: { rpm: 60, tpm: 1000 } });
    expect([...k.scopes].sort()).toEqual(["files:read", "inference"]);
    expect(k.project).toBe("team-a");
    expect(k.rate_limits).toEqual({ rpm: 60, tpm: 1000 });
    const entry = (await json(await t.api("/keys"))).data.find((x: any) => x.id === k.id);
    expect(entry.project).toBe("team-a");
    expect(entry.rate_limits).toEqual({ rpm: 60, tpm: 1000 });
  });

  test("every created secret is distinct and well-formed", async () => {
    const secrets = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const k = await createKeyFull({ name: `many-${i}` });
      expect(k.key).toMatch(KEY_FORMAT);
      secrets.add(k.key);
    }
    expect(secrets.size).toBe(5);
  });

  test("unknown scope → 400 naming scopes; nothing created", async () => {
    const before = (await json(await t.api("/keys"))).data.length;
    for (const scopes of [["files:read", "superuser"], ["ADMIN"], ["files:*"]]) {
      const res = await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "bad", scopes }) });
      expect(res.status).toBe(400);
      const body = await json(res);
      expect(body).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", param: "scopes", code: "invalid_value" } });
    }
    expect((await json(await t.api("/keys"))).data.length).toBe(before);
  });

  test("DELETE /keys of an unknown id → 404", async () => {
    const res = await t.api(`/keys/key_${randomBase62(24)}`, { method: "DELETE" });
    expect(res.status).toBe(404);
    expect((await json(res)).error).toMatchObject({ type: "not_found_error", code: "not_found" });
  });

  test("the database holds no secret in plain text", async () => {
    const k = await createKeyFull({ name: "stored-hashed" });
    let bytes: Buffer;
    if (t.server.ctx.db.engine === "sqlite") {
      // The database's files in the data dir, every byte of them.
      const dbFiles = readdirSync(t.dataDir).filter((n) => n.startsWith("offpeak.db"));
      expect(dbFiles).toContain("offpeak.db");
      bytes = Buffer.concat(dbFiles.map((n) => readFileSync(join(t.dataDir, n))));
    } else {
      // Postgres: every column of every api_keys row, as text.
      const rows = await t.server.ctx.db.select().from(t.server.ctx.db.t.apiKeys);
      bytes = Buffer.from(JSON.stringify(rows));
    }
    // We are reading the right bytes: the key's id and hash are there…
    expect(bytes.includes(Buffer.from(k.id))).toBe(true);
    expect(bytes.includes(Buffer.from(createHash("sha256").update(k.key).digest("hex")))).toBe(true);
    // …and its secret is not (nor is any other key's).
    for (const secret of [k.key, victimKey, k.key.slice(6)]) expect(bytes.includes(Buffer.from(secret))).toBe(false);
  });
});

describe("the Authorization header", () => {
  test("Bearer <key>: scheme in any case, spaces around the key; anything else is malformed", () => {
    const cases: [string, string | null][] = [
      ["Bearer abc", "abc"],
      ["bearer abc", "abc"],
      ["BEARER  abc  ", "abc"],
      ["Bearer sk-op-xyz", "sk-op-xyz"],
      ["Bearer", null],
      ["Bearer ", null],
      ["Bearer  ", null],
      ["Bearerabc", null],
      ["Bearer a b", null],
      ["Bearer a\tb", null],
      ["Bearer\tabc", null],
      [" Bearer abc", null],
      ["Basic abc", null],
      ["Bearer abc\t", null],
      ["Bearer \u00a0x", null],
      ["Bearer x\n", null],
    ];
    for (const [header, key] of cases) expect([header, bearerSecret(header)]).toEqual([header, key]);
  });

  test("a key with any character that /\\s/ calls a space in it is refused; with any other it is taken", () => {
    const wrong: number[] = [];
    for (let c = 0; c <= 0xffff; c++) {
      const ch = String.fromCharCode(c);
      const expected = /\s/.test(ch) ? null : `a${ch}b`;
      if (bearerSecret(`Bearer a${ch}b`) !== expected) wrong.push(c);
      if (bearerSecret(`bEaReR a${ch}b`) !== expected) wrong.push(c);
    }
    expect(wrong).toEqual([]);
  });
});

// GET /me: the calling key's id, project and scopes, for any valid key (the
// web console offers only what a key may do); 401 like every route without
// a valid key; in the OpenAPI document.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ADMIN_KEY, startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t?.stop();
});

describe("GET /me", () => {
  test("the admin key from OFFPEAK_ADMIN_KEY", async () => {
    const res = await t.api("/me");
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBeTruthy();
    expect(await res.json()).toEqual({ object: "api_key", id: "key_env_admin", project: "default", scopes: ["admin"] });
  });

  test("a created key: its own id, project and scopes, under both bases; a key with no scope it needs still may ask", async () => {
    const res = await t.api("/keys", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "reader", scopes: ["files:read", "batches:read"], project: "team-a" }),
    });
    const made: any = await res.json();
    const expected = { object: "api_key", id: made.id, project: "team-a", scopes: ["files:read", "batches:read"] };
    expect(await (await t.api("/me", { key: made.key })).json()).toEqual(expected);
    const v1 = await fetch(`${t.url}/v1/me`, { headers: { authorization: `Bearer ${made.key}` } });
    expect(await v1.json()).toEqual(expected);

    const inference = await t.createKey({ name: "chat only", scopes: ["inference"] });
    const me: any = await (await t.api("/me", { key: inference })).json();
    expect(me.scopes).toEqual(["inference"]);
    expect(me.id).toMatch(/^key_[0-9A-Za-z]{24}$/);
  });

  test("no key, a wrong key, a malformed header, a revoked key, a key in the query: 401 with the OpenAI error body", async () => {
    const made: any = await (
      await t.api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "to revoke" }) })
    ).json();
    expect((await t.api("/me", { key: made.key })).status).toBe(200);
    expect((await t.api(`/keys/${made.id}`, { method: "DELETE" })).status).toBe(200);

    const tries: [string, Promise<Response>][] = [
      ["none", t.api("/me", { key: null })],
      ["wrong", t.api("/me", { key: "sk-op-wrong-000000000000000000000000000000" })],
      ["malformed", t.api("/me", { key: null, headers: { authorization: `Basic ${ADMIN_KEY}` } })],
      ["revoked", t.api("/me", { key: made.key })],
      ["query", fetch(`${t.base}/me?api_key=${ADMIN_KEY}`)],
    ];
    for (const [what, p] of tries) {
      const res = await p;
      expect({ what, status: res.status }).toEqual({ what, status: 401 });
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
      const body: any = await res.json();
      expect(body.error.type).toBe("authentication_error");
      expect(body.error.code).toBe("invalid_api_key");
    }
  });

  test("read-only: POST /me is not a route", async () => {
    const res = await t.api("/me", { method: "POST" });
    expect(res.status).toBe(404);
  });

  test("listed in the OpenAPI document", async () => {
    const doc: any = await (await fetch(`${t.url}/docs/json`)).json();
    expect(doc.paths["/api/v1/me"]?.get?.summary).toMatch(/calling key/);
    expect(doc.paths["/v1/me"]).toBeUndefined();
  });
});

// docs/CONTRACT.md §2: a valid key without the needed scope gets 403 — before its body
// is parsed or validated, so a bad body never turns the 403 into a 400 and
// the refusal says nothing about what the body would have done.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startTestServer, type TestServer } from "./helpers/server";

let s: TestServer;
let noScopes: string;

beforeAll(async () => {
  s = await startTestServer();
  // A key whose only scope is irrelevant to every route below.
  noScopes = await s.createKey({ name: "files-reader", scopes: ["files:read"] });
});
afterAll(() => s.stop());

const cases: [string, string, string | undefined][] = [
  ["POST", "/chat/completions", "{}"],
  ["POST", "/chat/completions", "not json"],
  ["POST", "/embeddings", `{"model": 5}`],
  ["POST", "/batches", "{}"],
  ["POST", "/batches/batch_x/cancel", undefined],
  ["POST", "/chats", `{"model": []}`],
  ["POST", "/chats/chat_x/stream", "{"],
  ["POST", "/keys", `{"scopes": "nope"}`],
  ["DELETE", "/files/file-x", undefined],
  ["GET", "/models", undefined],
  ["GET", "/keys", undefined],
];

describe("403 comes before body parsing and validation", () => {
  for (const [method, path, body] of cases) {
    test(`${method} ${path} with ${body === undefined ? "no body" : `body ${body}`} → 403`, async () => {
      for (const base of ["/api/v1", "/v1"]) {
        const res = await fetch(s.url + base + path, {
          method,
          headers: { authorization: `Bearer ${noScopes}`, "content-type": "application/json" },
          body,
        });
        const json = (await res.json()) as { error: { code: string; type: string } };
        expect({ base, status: res.status, code: json.error.code }).toEqual({ base, status: 403, code: "insufficient_scope" });
      }
    });
  }

  test("the same key may still use what its scope grants", async () => {
    const res = await s.api("/files", { key: noScopes });
    expect(res.status).toBe(200);
  });
});

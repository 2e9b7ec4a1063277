// docs/CONTRACT.md §6: the built-in `offpeak-embed` model — string, string[] and token
// array inputs; the npm SDK's default (it asks for base64 and decodes)
// agrees exactly with encoding_format float; base64 is little-endian
// float32; `dimensions` 1..4096 (else 400); vectors are L2-normalised and
// deterministic. Also docs/CONTRACT.md §6 model listing: GET /models, GET /models/{id},
// SDK models.list()/retrieve().
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { startTestServer, type TestServer } from "./helpers/server";
import { REQUEST_ID, expectError, json } from "./helpers/inference";

let t: TestServer;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  client = t.sdk();
});
afterAll(async () => {
  await t?.stop();
});

const post = (path: string, body: unknown) => t.api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const norm = (v: number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0);

function decodeBase64(s: string): number[] {
  const buf = Buffer.from(s, "base64");
  expect(buf.length % 4).toBe(0);
  const out: number[] = [];
  for (let i = 0; i < buf.length; i += 4) out.push(buf.readFloatLE(i));
  return out;
}

describe("offpeak-embed", () => {
  test("a string, encoding_format float: the exact list shape, 256 dimensions, L2-normalised, real usage", async () => {
    const res = await post("/embeddings", { model: "offpeak-embed", input: "The quick brown fox", encoding_format: "float" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const body = await json(res);
    expect(Object.keys(body).sort()).toEqual(["data", "model", "object", "usage"]);
    expect(body.object).toBe("list");
    expect(body.model).toBe("offpeak-embed");
    expect(body.usage).toEqual({ prompt_tokens: 4, total_tokens: 4 });
    expect(body.data.length).toBe(1);
    expect(Object.keys(body.data[0]).sort()).toEqual(["embedding", "index", "object"]);
    expect(body.data[0].object).toBe("embedding");
    expect(body.data[0].index).toBe(0);
    const v = body.data[0].embedding as number[];
    expect(v.length).toBe(256);
    for (const x of v) expect(typeof x).toBe("number");
    expect(Math.abs(norm(v) - 1)).toBeLessThan(1e-5);
    expect(v.some((x) => x !== 0)).toBe(true);
  });

  test("deterministic: the same text gives the same vector, also inside a list; different texts differ", async () => {
    const a = await client.embeddings.create({ model: "offpeak-embed", input: "deterministic text", encoding_format: "float" });
    const b = await client.embeddings.create({ model: "offpeak-embed", input: ["other", "deterministic text"], encoding_format: "float" });
    expect(b.data.map((d) => d.index)).toEqual([0, 1]);
    expect(b.data[1]!.embedding).toEqual(a.data[0]!.embedding);
    expect(b.data[0]!.embedding).not.toEqual(a.data[0]!.embedding);
    expect(b.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
  });

  test("similar texts are closer than unrelated ones (word and character n-grams)", async () => {
    const r = await client.embeddings.create({
      model: "offpeak-embed",
      input: ["the cat sat on the mat", "the cat sat on a mat", "quarterly revenue forecast spreadsheet"],
      encoding_format: "float",
    });
    const [x, y, z] = r.data.map((d) => d.embedding);
    expect(dot(x!, y!)).toBeGreaterThan(dot(x!, z!) + 0.3);
  });

  test("the SDK default (base64 requested, decoded by the SDK) equals encoding_format float exactly", async () => {
    const input = ["alpha beta gamma", "δέλτα ünïcödé 🚀", "x"];
    const viaDefault = await client.embeddings.create({ model: "offpeak-embed", input });
    const viaFloat = await client.embeddings.create({ model: "offpeak-embed", input, encoding_format: "float" });
    expect(viaDefault.data.length).toBe(3);
    for (let i = 0; i < 3; i++) {
      expect(Array.isArray(viaDefault.data[i]!.embedding)).toBe(true);
      expect(viaDefault.data[i]!.embedding.length).toBe(256);
      expect(viaDefault.data[i]!.embedding).toEqual(viaFloat.data[i]!.embedding);
    }
    expect(viaDefault.usage).toEqual(viaFloat.usage);
  });

  test("encoding_format base64 over fetch is little-endian float32 of the float answer", async () => {
    const b64 = await json(await post("/embeddings", { model: "offpeak-embed", input: "bytes please", encoding_format: "base64", dimensions: 16 }));
    const flt = await json(await post("/embeddings", { model: "offpeak-embed", input: "bytes please", encoding_format: "float", dimensions: 16 }));
    expect(typeof b64.data[0].embedding).toBe("string");
    expect(Buffer.from(b64.data[0].embedding, "base64").length).toBe(16 * 4);
    expect(decodeBase64(b64.data[0].embedding)).toEqual(flt.data[0].embedding);
    expect(b64.usage).toEqual(flt.usage);
    // No encoding_format over plain HTTP means float (as the OpenAI API does).
    const dflt = await json(await post("/embeddings", { model: "offpeak-embed", input: "bytes please", dimensions: 16 }));
    expect(dflt.data[0].embedding).toEqual(flt.data[0].embedding);
  });

  test("token-array inputs: one token array, and a list of token arrays", async () => {
    const one = await client.embeddings.create({ model: "offpeak-embed", input: [1, 2, 3], encoding_format: "float" });
    expect(one.data.length).toBe(1);
    expect(one.data[0]!.embedding.length).toBe(256);
    expect(Math.abs(norm(one.data[0]!.embedding) - 1)).toBeLessThan(1e-5);
    expect(one.usage.prompt_tokens).toBe(3);
    const many = await client.embeddings.create({ model: "offpeak-embed", input: [[1, 2, 3], [40, 50]], encoding_format: "float" });
    expect(many.data.map((d) => d.index)).toEqual([0, 1]);
    expect(many.data[0]!.embedding).toEqual(one.data[0]!.embedding);
    expect(many.data[1]!.embedding).not.toEqual(one.data[0]!.embedding);
    expect(many.usage.prompt_tokens).toBe(5);
    // The SDK default path decodes token-array answers too.
    const dflt = await client.embeddings.create({ model: "offpeak-embed", input: [[1, 2, 3], [40, 50]] });
    expect(dflt.data.map((d) => d.embedding)).toEqual(many.data.map((d) => d.embedding));
  });

  test("dimensions: 1, 7, 4096 give vectors of that length, each L2-normalised", async () => {
    for (const dimensions of [1, 7, 4096]) {
      const r = await client.embeddings.create({ model: "offpeak-embed", input: "some words to embed", dimensions });
      expect(r.data[0]!.embedding.length).toBe(dimensions);
      expect(Math.abs(norm(r.data[0]!.embedding) - 1)).toBeLessThan(1e-5);
    }
    // Default is 256.
    const d = await client.embeddings.create({ model: "offpeak-embed", input: "some words to embed" });
    expect(d.data[0]!.embedding.length).toBe(256);
  });

  test("dimensions out of range or not an integer → 400 naming dimensions", async () => {
    for (const dimensions of [0, -1, 4097, 1e6, 2.5, "8", true, null]) {
      const res = await post("/embeddings", { model: "offpeak-embed", input: "x", dimensions });
      if (dimensions === null) {
        // null means "not given" (A field that has no value is sent as null).
        expect(res.status).toBe(200);
        expect((await json(res)).data[0].embedding.length).toBe(256);
        continue;
      }
      await expectError(res, 400, { param: "dimensions" });
    }
  });

  test("bad input and encoding_format → 400 naming the param", async () => {
    // Token ids are non-negative integers; an empty text would have no
    // features (a zero vector cannot be L2-normalised) and is refused too.
    for (const input of [5, [], [1.5, 2], [-1, 2], [[1, 2.5]], [[]], [["a"]], { text: "x" }, [null], ["ok", 3], "", ["a", ""]]) {
      await expectError(await post("/embeddings", { model: "offpeak-embed", input }), 400, { param: "input" });
    }
    await expectError(await post("/embeddings", { model: "offpeak-embed" }), 400, { param: "input" });
    await expectError(await post("/embeddings", { model: "offpeak-embed", input: "x", encoding_format: "hex" }), 400, { param: "encoding_format" });
  });
});

describe("models", () => {
  const BUILTINS = ["offpeak-echo", "offpeak-embed"];

  test("GET /models: the exact list shape with the built-ins", async () => {
    const res = await t.api("/models");
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(Object.keys(body).sort()).toEqual(["data", "object"]);
    expect(body.object).toBe("list");
    expect(body.data.map((m: any) => m.id).sort()).toEqual(BUILTINS);
    for (const m of body.data) {
      expect(Object.keys(m).sort()).toEqual(["created", "id", "object", "owned_by"]);
      expect(m.object).toBe("model");
      expect(Number.isInteger(m.created)).toBe(true);
      expect(m.created).toBeGreaterThan(1_600_000_000);
      expect(m.owned_by).toBe("offpeak");
    }
  });

  test("GET /models/{id} returns the same record as the list; unknown → 404 model_not_found", async () => {
    const list = (await json(await t.api("/models"))).data;
    for (const m of list) {
      const res = await t.api(`/models/${m.id}`);
      expect(res.status).toBe(200);
      expect(await json(res)).toEqual(m);
    }
    for (const id of ["gpt-4o", "offpeak-echo2", "OFFPEAK-ECHO", "org/model"]) {
      await expectError(await t.api(`/models/${id}`), 404, { code: "model_not_found" });
    }
  });

  test("SDK models.list() and models.retrieve()", async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id).sort()).toEqual(BUILTINS);
    const echo = await client.models.retrieve("offpeak-echo");
    expect(echo).toEqual({ id: "offpeak-echo", object: "model", created: echo.created, owned_by: "offpeak" });
    let err: any;
    try {
      await client.models.retrieve("no-such-model");
    } catch (e) {
      err = e;
    }
    expect(err?.status).toBe(404);
    expect(err?.error?.type).toBe("not_found_error");
  });
});

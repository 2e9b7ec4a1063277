// docs/CONTRACT.md §22: the body of POST /v1/messages/batches is read as it
// streams (src/anthropic/batches/requestsReader.ts), each chunk decoded once.
// Wherever the chunks are cut — inside a key, a string, an escape or a
// character of several bytes — each element comes out as the text it was
// sent as, in order; what follows the closing brace is refused, an
// unfinished character too. Pure: no server.
import { describe, expect, test } from "bun:test";
import { ApiError } from "../src/errors";
import { readRequests } from "../src/anthropic/batches/requestsReader";

/** A reader of `bytes` cut at `cuts` (offsets, ascending). */
function chunked(bytes: Uint8Array, cuts: number[]) {
  const edges = [0, ...cuts, bytes.length];
  let i = 0;
  return {
    read: async () => (i + 1 < edges.length ? { done: false as const, value: bytes.slice(edges[i]!, edges[++i]!) } : { done: true as const, value: undefined }),
  };
}

async function elementsOf(bytes: Uint8Array, cuts: number[]): Promise<string[]> {
  const out: string[] = [];
  for await (const group of readRequests(chunked(bytes, cuts))) for (const e of group) out.push(e.text);
  return out;
}

const elements = [
  JSON.stringify({ custom_id: "a", params: { model: "m", max_tokens: 4, messages: [{ role: "user", content: 'é 中文 🙂 \\ "} ] {' }] } }),
  JSON.stringify({ custom_id: "b-2", params: { nested: [[{}], { "k\"}": "v" }] } }),
  '{ "custom_id" : "c" , "params" : { "x" : "\\u00e9\\"" } }',
];
const body = new TextEncoder().encode(` { "req\\u0075ests" :[ ${elements.join(" ,\n")} ] }\n`);

describe("the requests of a message batch's body, read as it streams", () => {
  test("cut into two pieces at every byte: each element whole, in order", async () => {
    // The escaped key is not "requests" as written: refused. The same body with the plain key:
    const plain = new TextEncoder().encode(` { "requests" :[ ${elements.join(" ,\n")} ] }\n`);
    for (let at = 1; at < plain.length; at++) expect(await elementsOf(plain, [at])).toEqual(elements);
    // A key is compared as its text, escapes unread (as JSON.parse would not be asked to).
    await expect(elementsOf(body, [])).rejects.toThrow(ApiError);
  });

  test("one byte a chunk: the same", async () => {
    const plain = new TextEncoder().encode(`{"requests":[${elements.join(",")}]}`);
    expect(await elementsOf(plain, Array.from({ length: plain.length - 1 }, (_, i) => i + 1))).toEqual(elements);
  });

  test("after the closing brace: whitespace only; an unfinished character there is refused", async () => {
    const ok = new TextEncoder().encode(`{"requests":[${elements[0]}]} \r\n`);
    expect(await elementsOf(ok, [5])).toEqual([elements[0]!]);
    const torn = new Uint8Array([...new TextEncoder().encode(`{"requests":[${elements[0]}]}`), 0xe4, 0xb8]);
    await expect(elementsOf(torn, [torn.length - 1])).rejects.toThrow(/more after the closing/);
  });
});

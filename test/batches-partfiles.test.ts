// a torn (half-written) result line longer than 64 KB at the end of a
// part file (SIGKILL during a flush of big embeddings lines) must be cut off,
// not make the shard fail forever.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recoverParts } from "../src/batches/worker/partFiles";

const dir = mkdtempSync(join(tmpdir(), "offpeak-review-parts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("part-file recovery", () => {
  test("a torn last line over 64 KB is truncated and the complete lines recovered", async () => {
    const full = JSON.stringify({ id: "batch_req_x", custom_id: "a", response: { status_code: 200, request_id: null, body: { data: [1, 2, 3] } }, error: null }) + "\n";
    const torn = JSON.stringify({ id: "batch_req_y", custom_id: "b", response: { status_code: 200, request_id: null, body: { v: "x".repeat(100_000) } } }).slice(0, 90_000);
    const out = join(dir, "out-0.jsonl");
    writeFileSync(out, full + torn);
    const r = await recoverParts(out, join(dir, "err-0.jsonl")).then((x) => [...x.done.keys()], (e) => String(e));
    expect(r).toEqual(["a"]);
  });

  test("a message batch's answer (Anthropic's message): its usage read back in the endpoint's terms, cache reads counted in the input", async () => {
    const message = { id: "msg_1", type: "message", usage: { input_tokens: 8, output_tokens: 9, cache_creation_input_tokens: null, cache_read_input_tokens: 4 } };
    const line = JSON.stringify({ id: "batch_req_x", custom_id: "m", response: { status_code: 200, request_id: null, body: message }, error: null }) + "\n";
    const out = join(dir, "out-1.jsonl");
    writeFileSync(out, line);
    const { done } = await recoverParts(out, join(dir, "err-1.jsonl"));
    expect(done.get("m")).toEqual({ prompt_tokens: 12, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 4 } });
  });
});

// StreamUsage: the completion tokens of a streamed upstream answer, read as
// it passes (src/inference/upstream/interactive.ts), however the bytes are cut.
import { describe, expect, test } from "bun:test";
import { StreamUsage } from "../src/inference/upstream/interactive";

const enc = new TextEncoder();
const event = (obj: unknown, eol = "\n") => `data: ${JSON.stringify(obj)}${eol}${eol}`;
const delta = (d: Record<string, unknown>) => ({ object: "chat.completion.chunk", choices: [{ index: 0, delta: d, finish_reason: null }] });

/** Feeds `text` in pieces of `size` bytes (so events, CRLFs and UTF-8 sequences are cut anywhere). */
function usageOf(text: string, size: number, finish = true): number {
  const u = new StreamUsage();
  const bytes = enc.encode(text);
  for (let i = 0; i < bytes.length; i += size) u.push(bytes.subarray(i, i + size));
  if (finish) u.finish();
  return u.completionTokens;
}

describe("StreamUsage", () => {
  const stream =
    event(delta({ role: "assistant", reasoning_content: "think it over" })) + // 3
    event(delta({ content: "Héllo wörld, " })) + // 3
    event(delta({ content: "again" })) + // 1
    event(delta({ tool_calls: [{ index: 0, function: { name: "f", arguments: '{"a": 1}' } }] })) + // { " a " : 1 } = 7
    event(delta({ refusal: "no" })) + // 1
    "data: [DONE]\n\n";

  test("without usage: the tokens of content, reasoning, refusal and tool-call deltas, however the bytes are cut", () => {
    for (const size of [1, 2, 3, 7, 64, 1 << 16]) expect({ size, n: usageOf(stream, size) }).toEqual({ size, n: 15 });
  });

  test("CRLF line endings, cut anywhere", () => {
    const crlf = stream.replaceAll("\n", "\r\n");
    for (const size of [1, 2, 3, 5]) expect({ size, n: usageOf(crlf, size) }).toEqual({ size, n: 15 });
  });

  test("reported usage wins over the estimate", () => {
    const withUsage = stream.replace("data: [DONE]", `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 99, total_tokens: 104 } })}\n\ndata: [DONE]`);
    expect(usageOf(withUsage, 1)).toBe(99);
  });

  test("a last event without its blank line counts once the stream ends", () => {
    const text = event(delta({ content: "one" })) + `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: 42 } })}\n`;
    expect(usageOf(text, 4, false)).toBe(1);
    expect(usageOf(text, 4, true)).toBe(42);
  });

  test("garbage and comments are ignored", () => {
    expect(usageOf(": keep-alive\n\ndata: {not json\n\n" + event(delta({ content: "fine" })), 3)).toBe(1);
  });
});

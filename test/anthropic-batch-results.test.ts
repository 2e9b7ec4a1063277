// docs/CONTRACT.md §22, a message batch's results. The batch engine writes
// each answer of a message batch as Anthropic's message
// (src/batches/worker/resultLines.ts okLine, shape "message"); the results
// route makes its `succeeded` line by cutting that output line
// (src/anthropic/batches/results.ts messageLine). The cut line must be the
// one the full translation makes (the answer parsed, toMessage, serialised),
// and a line of any other shape must be left to the full translation.
// Pure: no server.
import { describe, expect, test } from "bun:test";
import { toMessage } from "../src/anthropic/message";
import { messageLine, succeededLineParsed } from "../src/anthropic/batches/results";
import { okLine } from "../src/batches/worker/resultLines";

/** offpeak-echo's answer. */
const echo = (content = "request number 0 of the benchmark, please echo", extra = "") =>
  JSON.parse(
    `{"id":"chatcmpl-aTHgn0cmog07mBeQwwaCNCgQ","object":"chat.completion","created":1795953275,"model":"offpeak-echo","choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)},"refusal":null},"logprobs":null,"finish_reason":"stop"${extra}}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"offpeak-echo"}`,
  );

/** The output line the batch engine writes for `body` in a message batch, and its result line cut from it. */
function written(body: unknown, customId = "r1", requestId: string | null = "req_XvREpMBglt5w2oCRUpa80MXD") {
  const line = okLine("message", customId, 200, requestId, JSON.stringify(body), body);
  expect(line.endsWith("\n")).toBe(true);
  const text = line.slice(0, -1);
  const message = JSON.parse(text).response.body;
  return { text, message, cut: messageLine(text) };
}

describe("a succeeded line cut from a message batch's output line", () => {
  test("offpeak-echo's answer: the line the full translation makes, with the message's id as written", () => {
    const body = echo();
    const { message, cut } = written(body);
    expect(cut).not.toBeNull();
    expect(cut!.endsWith("}\n")).toBe(true);
    expect(message.id).toMatch(/^msg_[A-Za-z0-9]{24}$/);
    expect(JSON.parse(cut!)).toEqual({ custom_id: "r1", result: { type: "succeeded", message: toMessage(body, { id: message.id }) } });
    expect(message).toMatchObject({
      type: "message",
      content: [{ type: "text", text: "request number 0 of the benchmark, please echo", citations: null }],
      stop_reason: "end_turn",
      usage: { input_tokens: 8, output_tokens: 9, cache_read_input_tokens: 4 },
    });
  });

  test("escapes, unicode, a stop string, limits hit, tool calls, odd custom_ids and request ids: each the same as the full translation", () => {
    const bodies = [
      echo('a "quoted" line\nand é\\ "body":{"id":"msg_x","type":"message"}'),
      echo("é 中文 🙂 \u2028 </script>", ',"stop_reason":"END"'),
      echo(""),
      { ...echo("cut"), choices: [{ ...echo().choices[0], finish_reason: "length" }] },
      { ...echo("x"), choices: [{ message: { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: '{"body":{"a":1}}' } }] }, finish_reason: "tool_calls" }] },
      { choices: [{ message: { content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] } }] },
      {},
    ];
    const customIds = ["r1", "A_b-9".repeat(12), "body", "x-"];
    const requestIds = [null, 'up "body":{"id":"msg_', "req_1"];
    let n = 0;
    for (const body of bodies)
      for (const customId of customIds)
        for (const requestId of requestIds) {
          const { message, cut } = written(body, customId, requestId);
          expect(cut).not.toBeNull();
          expect(JSON.parse(cut!)).toEqual({ custom_id: customId, result: { type: "succeeded", message: toMessage(body, { id: message.id }) } });
          n++;
        }
    expect(n).toBe(bodies.length * customIds.length * requestIds.length);
  });

  test("a line of another shape is left to the full translation: a chat completion (a batch run before answers were written as messages), an error, a custom_id with an escape", () => {
    const chat = JSON.stringify({ id: "batch_req_x", custom_id: "r1", response: { status_code: 200, request_id: null, body: echo() }, error: null });
    expect(messageLine(chat)).toBeNull();
    // …which the full way still translates.
    expect(JSON.parse(succeededLineParsed(chat, "msg_0123456789abcdefABCDEFGH"))).toEqual({
      custom_id: "r1",
      result: { type: "succeeded", message: toMessage(echo(), { id: "msg_0123456789abcdefABCDEFGH" }) },
    });
    const { text } = written(echo());
    expect(messageLine(text.replace('"error":null}', '"error":{"code":"x"}}'))).toBeNull();
    expect(messageLine(text.replace('"custom_id":"r1"', '"custom_id":"r\\"1"'))).toBeNull();
    expect(messageLine(text.replace('"type":"message"', '"type":"other"'))).toBeNull();
    expect(messageLine(" " + text)).toBeNull();
  });
});

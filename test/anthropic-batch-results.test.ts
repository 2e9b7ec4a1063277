// docs/CONTRACT.md §22, a message batch's results: the `succeeded` line
// written from the output line's text (src/anthropic/batches/succeededLine.ts)
// is the one the full translation makes (parsed, toMessage, serialised),
// field for field, for the lines it takes; the lines it cannot be sure of it
// leaves to the full translation. Pure: no server.
import { describe, expect, test } from "bun:test";
import { succeededLineParsed } from "../src/anthropic/batches/results";
import { succeededText } from "../src/anthropic/batches/succeededLine";

const ID = "msg_0123456789abcdefABCDEFGH";

/** An output line as the engine writes it around `body` (JSON text, spliced as an upstream's one-line answer is). */
const line = (body: string, customId = "r1") =>
  `{"id":"batch_req_PUkQpLVtGDxhsF7x6XwC38Nd","custom_id":"${customId}","response":{"status_code":200,"request_id":"req_XvREpMBglt5w2oCRUpa80MXD","body":${body}},"error":null}`;

/** offpeak-echo's answer, as in a message batch's output file. */
const echo = (content = "request number 0 of the benchmark, please echo", extra = "") =>
  `{"id":"chatcmpl-aTHgn0cmog07mBeQwwaCNCgQ","object":"chat.completion","created":1795953275,"model":"offpeak-echo","choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)},"refusal":null},"logprobs":null,"finish_reason":"stop"${extra}}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"offpeak-echo"}`;

/** The same line both ways: the fast one, where it answers, must be valid JSON equal to the full one. */
function bothWays(text: string): { fast: string | null; full: string } {
  const full = succeededLineParsed(text, ID);
  const fast = succeededText(text, ID);
  if (fast !== null) {
    expect(fast.endsWith("\n")).toBe(true);
    expect(JSON.parse(fast)).toEqual(JSON.parse(full));
  }
  return { fast, full };
}

describe("a succeeded line written from the output line's text", () => {
  test("offpeak-echo's answer: taken, and the same as the full translation", () => {
    const { fast, full } = bothWays(line(echo()));
    expect(fast).not.toBeNull();
    expect(JSON.parse(full).result.message).toMatchObject({
      id: ID,
      content: [{ type: "text", text: "request number 0 of the benchmark, please echo", citations: null }],
      stop_reason: "end_turn",
      usage: { input_tokens: 12, output_tokens: 9, cache_read_input_tokens: 0 },
    });
  });

  test("an upstream's answer with whitespace, escapes, unicode, a stop string, cached tokens, limits hit: taken, the same", () => {
    const bodies = [
      // Python's json.dumps spacing, keys in another order, a stop string named (vLLM's stop_reason).
      `{ "object": "chat.completion", "usage": { "completion_tokens": 5, "prompt_tokens": 40, "prompt_tokens_details": { "cached_tokens": 32 } }, "choices": [ { "finish_reason": "stop", "stop_reason": "END", "message": { "content": "a \\"quoted\\" line\\nand \\u00e9\\\\", "role": "assistant", "tool_calls": [] } } ], "model": "my-\\u006dodel" }`,
      echo("é 中文 🙂 \u2028 </script>", ',"stop_reason":null'),
      echo("", ""),
      echo("cut short").replace('"finish_reason":"stop"', '"finish_reason":"length"'),
      echo("filtered").replace('"finish_reason":"stop"', '"finish_reason":"content_filter"'),
      echo("x").replace('"finish_reason":"stop"', '"finish_reason":"tool_calls"'),
      echo("x").replace('"finish_reason":"stop"', '"finish_reason":"\\u006cength"'),
      echo("x").replace('"finish_reason":"stop"', '"finish_reason":null'),
      echo("x", ',"stop_reason":""'),
      echo("x", ',"stop_reason":7'),
      // Odd usage: negative, fractional, exponent, missing, null details, a string.
      echo("x").replace('"prompt_tokens":12', '"prompt_tokens":-3'),
      echo("x").replace('"prompt_tokens":12', '"prompt_tokens":1.5e2'),
      echo("x").replace('"completion_tokens":9', '"completion_tokens":"9"'),
      echo("x").replace('"prompt_tokens_details":{"cached_tokens":0}', '"prompt_tokens_details":null'),
      echo("x").replace('"cached_tokens":0', '"cached_tokens":-1'),
      echo("x").replace('"cached_tokens":0', '"cached_tokens":-0'),
      echo("x").replace('"cached_tokens":0', '"cached_tokens":20'),
      echo("x").replace(/"usage":\{.*?\}\},/, '"usage":null,'),
      // Odd shapes the full translation reads as an empty answer.
      `{"model":5,"choices":[],"usage":[]}`,
      `{"choices":{"message":{"content":"x"}}}`,
      `{"choices":["x",{"message":{"content":"second"}}]}`,
      `{"choices":[{"message":null,"finish_reason":{"a":1}}]}`,
      `{"choices":[{"message":{"content":null,"tool_calls":{"a":1}}}]}`,
      `{"choices":[{"message":{"content":{"text":"x"}}}]}`,
      `[]`,
      `null`,
      `"text"`,
      // A key given twice: the last counts.
      `{"model":"a","model":"b","choices":[{"message":{"content":"one"}}],"choices":[{"message":{"content":"two"},"message":{"role":"assistant"}}]}`,
      `{"usage":{"prompt_tokens":4},"usage":{"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1},"prompt_tokens_details":{}}}`,
      `{"choices":[{"message":{"content":"one"},"finish_reason":"length","stop_reason":"S"}],"choices":[]}`,
      `{"choices":[{"message":{"content":"one"},"finish_reason":"length"}],"choices":"x"}`,
      `{"choices":[{"message":{"content":"one"},"stop_reason":"S","stop_reason":null}]}`,
      `{"model":"a","usage":{"prompt_tokens":4,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1}},"usage":[],"model":{}}`,
    ];
    for (const b of bodies) {
      const { fast } = bothWays(line(b));
      expect(fast).not.toBeNull();
    }
  });

  test("a response without a body, a body or response given twice, custom_ids of every allowed character: taken, the same", () => {
    expect(bothWays(`{"custom_id":"r1","response":{"body":${echo()}},"response":{"status_code":200},"error":null}`).fast).not.toBeNull();
    expect(bothWays(`{"custom_id":"r1","response":{"body":${echo()},"body":null},"custom_id":"r2"}`).fast).not.toBeNull();
    expect(bothWays(`{"id":"batch_req_x","custom_id":"a-Z_09","response":{"status_code":200,"request_id":null},"error":null}`).fast).not.toBeNull();
    expect(bothWays(line(echo(), "A_b-9".repeat(12))).fast).not.toBeNull();
  });

  test("what it cannot be sure of goes the full way: tool calls, content as parts, an escaped key of interest, numbers past a double, a custom_id that is not a string", () => {
    const full = [
      echo("x").replace('"refusal":null', '"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\\"a\\":1}"}}]'),
      `{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}`,
      `{"choices":[{"message":{"c\\u006fntent":"hidden"}}]}`,
      echo("x").replace('"prompt_tokens":12', '"prompt_tokens":1e400'),
    ];
    for (const b of full) expect(bothWays(line(b)).fast).toBeNull();
    expect(bothWays(`{"id":"batch_req_x","custom_id":7,"response":{"status_code":200,"request_id":null,"body":${echo()}},"error":null}`).fast).toBeNull();
  });

  test("many generated answers (keys shuffled, repeated, spaced, of other types): each the same both ways", () => {
    // A fixed seed: the same lines every run.
    let seed = 42;
    const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const values = ["null", "true", "0", "-0", "3", "2.5", "-7", "1e3", '""', '"x"', '"stop"', '"length"', "[]", "{}", '[{"a":1}]', '{"a":[1,{"b":"}"}]}'];
    const obj = (entries: [string, string][]): string => {
      const out = entries.filter(() => rand() > 0.15);
      if (rand() < 0.2 && entries.length) out.push(pick(entries));
      for (let i = out.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [out[i], out[j]] = [out[j]!, out[i]!];
      }
      const sp = () => pick(["", "", " ", "\n", "\t "]);
      return `{${sp()}${out.map(([k, v]) => `"${k}"${sp()}:${sp()}${v}`).join(`,${sp()}`)}${sp()}}`;
    };
    const either = (good: () => string) => (rand() < 0.8 ? good() : pick(values));
    let taken = 0;
    for (let n = 0; n < 3000; n++) {
      const details = () => obj([["cached_tokens", pick(values)]]);
      const usage = () =>
        obj([
          ["prompt_tokens", pick(["12", "40", ...values])],
          ["completion_tokens", pick(["9", ...values])],
          ["total_tokens", "21"],
          ["prompt_tokens_details", either(details)],
        ]);
      const message = () =>
        obj([
          ["role", '"assistant"'],
          ["content", pick(['"hello"', '"a\\"b\\\\c\\u00e9"', '""', "null", "1", "{}"])],
          ["tool_calls", pick(["[]", "null", "{}"])],
          ["refusal", "null"],
        ]);
      const choice = () =>
        obj([
          ["index", "0"],
          ["message", either(message)],
          ["finish_reason", pick(['"stop"', '"length"', '"tool_calls"', '"content_filter"', '"function_call"', ...values])],
          ["stop_reason", pick(['"END"', '""', "null", "3"])],
        ]);
      const body = either(() =>
        obj([
          ["id", '"chatcmpl-1"'],
          ["model", pick(['"offpeak-echo"', '"m\\u00e9"', ...values])],
          ["choices", either(() => `[${[choice(), choice()].slice(0, Math.floor(rand() * 3)).join(",")}]`)],
          ["usage", either(usage)],
          ["system_fingerprint", '"fp"'],
        ]),
      );
      if (bothWays(line(body)).fast !== null) taken++;
    }
    // Nearly all are taken (none of them has tool calls or content as parts): the comparison above covered them.
    expect(taken).toBeGreaterThan(2900);
  });
});

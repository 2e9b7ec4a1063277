// /v1/chat/completions: offpeak-echo answers (inference/builtin/echo.ts); usage in the Chat
// Completions shape; streamed upstream answers are chat.completion.chunk events.
import { echoCompletion } from "../inference/builtin/echo";
import { countTokens } from "../inference/builtin/tokens";
import { readChatUsage, type EndpointKind, type StreamTally } from "./kind";

export const chatCompletions: EndpointKind = {
  endpoint: "/v1/chat/completions",
  path: "/chat/completions",
  builtin: "echo",
  noun: "chat completions",
  answer: (body, ids, created) => echoCompletion(body, ids.next("chatcmpl-"), created),
  readUsage: readChatUsage,
  readStreamEvent: readChatStreamEvent,
};

/** What is read of a streamed delta (anything may be missing or of another type). */
interface Delta {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  refusal?: unknown;
  function_call?: { arguments?: unknown };
  tool_calls?: { function?: { arguments?: unknown } }[];
}

/**
 * A chat.completion.chunk: its usage (sent when the client asked for
 * stream_options.include_usage) wins; otherwise the text of its content,
 * reasoning, refusal and tool-call deltas is counted.
 */
export function readChatStreamEvent(event: unknown, tally: StreamTally): void {
  const chunk = event as { choices?: { delta?: Delta }[]; usage?: { completion_tokens?: unknown } | null } | null;
  const reported = chunk?.usage?.completion_tokens;
  if (typeof reported === "number" && reported >= 0) tally.reported = reported;
  for (const choice of Array.isArray(chunk?.choices) ? chunk.choices : []) {
    const d = choice?.delta;
    if (!d || typeof d !== "object") continue;
    for (const text of [d.content, d.reasoning_content, d.reasoning, d.refusal, d.function_call?.arguments]) if (typeof text === "string") tally.estimated += countTokens(text);
    if (Array.isArray(d.tool_calls)) for (const call of d.tool_calls) if (typeof call?.function?.arguments === "string") tally.estimated += countTokens(call.function.arguments);
  }
}

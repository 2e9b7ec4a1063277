// Anthropic's `/v1/messages` as an endpoint kind (src/endpoints/kind.ts):
// what the admission, the upstream pass-through (for an upstream with
// `api: "anthropic"`) and a batch runner read of it. Not in ENDPOINT_KINDS:
// it is no OpenAI batch `endpoint`, and its interactive route is
// ./routes.ts. Plain data and pure functions, like every kind module.
import { echoCompletion } from "../inference/builtin/echo";
import { countTokens } from "../inference/builtin/tokens";
import { num, type EndpointKind, type StreamTally, type TokenCounts } from "../endpoints/kind";
import { toMessage } from "./message";
import { toChatRequest } from "./request";

export const messages: EndpointKind = {
  endpoint: "/v1/messages",
  path: "/messages",
  builtin: "echo",
  noun: "messages",
  /** offpeak-echo's answer: the request translated, answered as a chat completion, translated back. */
  answer: (body, ids, created) => {
    const chat = toChatRequest(body);
    return toMessage(echoCompletion(chat, ids.next("chatcmpl-"), created), { model: String(body.model), id: ids.next("msg_") });
  },
  readUsage: readMessageUsage,
  readStreamEvent: readMessageStreamEvent,
};

interface MessageUsage {
  input_tokens?: unknown;
  output_tokens?: unknown;
  cache_read_input_tokens?: unknown;
  cache_creation_input_tokens?: unknown;
}

/** A message's `usage`: Anthropic counts cache reads and writes apart from `input_tokens`; offpeak's input is all of them. */
export function readMessageUsage(raw: unknown, into: TokenCounts): void {
  const u = (raw !== null && typeof raw === "object" ? raw : {}) as MessageUsage;
  into.cached = num(u.cache_read_input_tokens);
  into.input = num(u.input_tokens) + into.cached + num(u.cache_creation_input_tokens);
  into.output = num(u.output_tokens);
  into.reasoning = 0;
}

/** One event of a streamed message: message_delta's usage.output_tokens wins; else the text of the deltas is counted. */
export function readMessageStreamEvent(event: unknown, tally: StreamTally): void {
  const e = event as { type?: unknown; usage?: { output_tokens?: unknown }; delta?: { text?: unknown; partial_json?: unknown; thinking?: unknown } } | null;
  if (e?.type === "message_delta") {
    const reported = e.usage?.output_tokens;
    if (typeof reported === "number" && reported >= 0) tally.reported = reported;
  } else if (e?.type === "content_block_delta" && e.delta) {
    for (const text of [e.delta.text, e.delta.partial_json, e.delta.thinking]) if (typeof text === "string") tally.estimated += countTokens(text);
  }
}

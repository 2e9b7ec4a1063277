// Anthropic's Messages API ⇄ Chat Completions: the pure translations
// (docs/CONTRACT.md §22), in one place for every user of them — the
// interactive route (./service.ts) and a batch runner alike. None of them
// touches server state; each throws only ApiError (a 400 naming the field).
//
//   toChatRequest(params, {requireMaxTokens?})  (./request.ts)
//     A Messages request body (`model`, `max_tokens`, `messages`, `system`,
//     `stop_sequences`, `temperature`, `top_p`, `top_k`, `tools`,
//     `tool_choice`, `stream`; `metadata` ignored) → the chat completion
//     request body that answers it. Throws invalid_value / missing_field
//     with `param` the Anthropic field's path ("messages.0.content.1.type").
//
//   toMessage(chatCompletion, {model?, id?})  (./message.ts)
//     A chat.completion → the `message` object (`msg_…` id unless given;
//     `model` as the client named it; text and tool_use blocks;
//     stop_reason end_turn | max_tokens | stop_sequence | tool_use |
//     refusal; usage with input_tokens excluding cache reads and
//     cache_read_input_tokens from prompt_tokens_details.cached_tokens).
//
//   new ChatStreamTranslator({id, model, inputTokens})  (./events.ts)
//     start() → message_start and ping; push(chunk) → the events of one
//     chat.completion.chunk; end() → content_block_stop, message_delta,
//     message_stop. messageEvents(message) gives the events of a whole one.
//
//   messages  (./kind.ts)
//     /v1/messages as an EndpointKind: readUsage and readStreamEvent for
//     Anthropic's shapes, and offpeak-echo's answer to one request body.
export { toChatRequest, type ChatRequestOptions } from "./request";
export { toMessage, stopReasonOf, usageOf, type AnthropicMessage, type AnthropicUsage, type ContentBlock, type MessageOptions, type StopReason } from "./message";
export { ChatStreamTranslator, messageEvents, type MessageEvent, type StreamStart } from "./events";
export { messages } from "./kind";

// Chat completion chunks → Anthropic's stream events (docs/CONTRACT.md §22),
// one chunk at a time: each chunk's events are known when it arrives, so the
// answer is never held whole. Pure (the route in ./stream.ts feeds it).
//
// Order, as Anthropic streams: message_start, ping, then per content block
// content_block_start, its deltas (text_delta, or input_json_delta for a
// tool call's arguments), content_block_stop; then message_delta
// (stop_reason, stop_sequence, usage.output_tokens) and message_stop.
import { countTokens } from "../inference/builtin/tokens";
import { stopReasonOf, usageOf, type AnthropicMessage } from "./message";

export type MessageEvent = { type: string } & Record<string, unknown>;

interface ChunkChoice {
  index?: unknown;
  delta?: { content?: unknown; tool_calls?: { index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } }[] } | null;
  finish_reason?: unknown;
  stop_reason?: unknown;
}

export interface StreamStart {
  id: string;
  /** The model as the client named it. */
  model: string;
  /** message_start's input_tokens: offpeak's own count (the engine's comes with the usage chunk, in message_delta). */
  inputTokens: number;
}

/** Translates one chat.completion.chunk stream; call start(), push() per chunk, then finish(). */
export class ChatStreamTranslator {
  private index = -1;
  /** The open block: text, or the chat tool call (by its index) being streamed. */
  private open: { kind: "text" } | { kind: "tool"; call: number } | null = null;
  private finish: unknown = null;
  private matched: unknown = null;
  private sawToolCall = false;
  private usage: unknown = null;
  /** Output tokens as counted from the deltas, for an engine that sends no usage chunk. */
  private estimated = 0;

  constructor(private readonly head: StreamStart) {}

  start(): MessageEvent[] {
    const { id, model, inputTokens } = this.head;
    const message = {
      id,
      type: "message",
      role: "assistant",
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      container: null,
      usage: { input_tokens: inputTokens, output_tokens: 0, cache_creation_input_tokens: null, cache_read_input_tokens: null, server_tool_use: null, service_tier: null },
    };
    return [{ type: "message_start", message }, { type: "ping" }];
  }

  /** The events one chunk makes (often none: a role chunk, a usage chunk). */
  push(chunk: unknown): MessageEvent[] {
    const c = (chunk ?? {}) as { choices?: unknown; usage?: unknown };
    if (c.usage && typeof c.usage === "object") this.usage = c.usage;
    const out: MessageEvent[] = [];
    for (const choice of Array.isArray(c.choices) ? (c.choices as ChunkChoice[]) : []) {
      if ((choice?.index ?? 0) !== 0) continue;
      const d = choice.delta;
      if (d && typeof d.content === "string" && d.content !== "") {
        if (this.open?.kind !== "text") this.openBlock(out, { kind: "text" }, { type: "text", text: "", citations: null });
        this.estimated += countTokens(d.content);
        out.push({ type: "content_block_delta", index: this.index, delta: { type: "text_delta", text: d.content } });
      }
      for (const call of Array.isArray(d?.tool_calls) ? d.tool_calls : []) {
        const n = typeof call?.index === "number" ? call.index : 0;
        if (this.open?.kind !== "tool" || this.open.call !== n) {
          this.sawToolCall = true;
          const name = typeof call?.function?.name === "string" ? call.function.name : "";
          this.openBlock(out, { kind: "tool", call: n }, { type: "tool_use", id: typeof call?.id === "string" ? call.id : `toolu_${this.head.id}_${n}`, name, input: {} });
        }
        const args = call?.function?.arguments;
        if (typeof args === "string" && args !== "") {
          this.estimated += countTokens(args);
          out.push({ type: "content_block_delta", index: this.index, delta: { type: "input_json_delta", partial_json: args } });
        }
      }
      if (choice.finish_reason != null) this.finish = choice.finish_reason;
      if (choice.stop_reason != null) this.matched = choice.stop_reason;
    }
    return out;
  }

  /** The stream's end: the open block closes, then message_delta and message_stop. */
  end(): MessageEvent[] {
    const out: MessageEvent[] = [];
    this.closeBlock(out);
    const reported = this.usage ? usageOf(this.usage) : null;
    const usage: Record<string, unknown> = { output_tokens: reported ? reported.output_tokens : this.estimated };
    if (reported) {
      usage.input_tokens = reported.input_tokens;
      usage.cache_read_input_tokens = reported.cache_read_input_tokens;
    }
    out.push({ type: "message_delta", delta: { ...stopReasonOf(this.finish, this.matched, this.sawToolCall), stop_details: null, container: null }, usage });
    out.push({ type: "message_stop" });
    return out;
  }

  private openBlock(out: MessageEvent[], open: NonNullable<ChatStreamTranslator["open"]>, block: Record<string, unknown>): void {
    this.closeBlock(out);
    this.open = open;
    this.index++;
    out.push({ type: "content_block_start", index: this.index, content_block: block });
  }

  private closeBlock(out: MessageEvent[]): void {
    if (!this.open) return;
    this.open = null;
    out.push({ type: "content_block_stop", index: this.index });
  }
}

/**
 * The events of a whole message: for an engine that answered a streamed
 * request with one JSON body (some ignore `stream`), and for tests.
 */
export function messageEvents(message: AnthropicMessage): MessageEvent[] {
  const head = { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...message.usage, output_tokens: 0 } };
  const out: MessageEvent[] = [{ type: "message_start", message: head }, { type: "ping" }];
  message.content.forEach((block, index) => {
    if (block.type === "text") {
      out.push({ type: "content_block_start", index, content_block: { ...block, text: "" } });
      out.push({ type: "content_block_delta", index, delta: { type: "text_delta", text: block.text } });
    } else {
      out.push({ type: "content_block_start", index, content_block: { ...block, input: {} } });
      out.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: JSON.stringify(block.input) } });
    }
    out.push({ type: "content_block_stop", index });
  });
  const { stop_reason, stop_sequence, usage } = message;
  out.push({ type: "message_delta", delta: { stop_reason, stop_sequence, stop_details: null, container: null }, usage: { output_tokens: usage.output_tokens, input_tokens: usage.input_tokens, cache_read_input_tokens: usage.cache_read_input_tokens } });
  out.push({ type: "message_stop" });
  return out;
}

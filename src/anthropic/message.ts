// A chat completion → Anthropic's `message` (docs/CONTRACT.md §22). Pure.
// Only the first choice is read: a Messages request asks for one answer.
import { base62, newId } from "../ids";

type Json = Record<string, unknown>;

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" | "refusal";

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number | null;
  cache_read_input_tokens: number | null;
  server_tool_use: null;
  service_tier: null;
}

export type ContentBlock = { type: "text"; text: string; citations: null } | { type: "tool_use"; id: string; name: string; input: unknown };

export interface AnthropicMessage {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: ContentBlock[];
  stop_reason: StopReason;
  stop_sequence: string | null;
  stop_details: null;
  container: null;
  usage: AnthropicUsage;
}

export interface MessageOptions {
  /** The model as the client named it (the chat answer may name the engine's own). Default: the completion's. */
  model?: string;
  /** Default: a fresh `msg_…` id. */
  id?: string;
}

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : 0);

/**
 * `finish_reason` in Anthropic's words. A stop string is known when the
 * choice names it in `stop_reason` (vLLM does, and offpeak-echo): then
 * `stop_sequence`; a plain "stop" is `end_turn`.
 */
export function stopReasonOf(finish: unknown, matched: unknown, hasToolCalls: boolean): { stop_reason: StopReason; stop_sequence: string | null } {
  if (finish === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  if (finish === "tool_calls" || finish === "function_call" || (hasToolCalls && (finish === "stop" || finish == null))) return { stop_reason: "tool_use", stop_sequence: null };
  if (finish === "content_filter") return { stop_reason: "refusal", stop_sequence: null };
  if (typeof matched === "string" && matched.length > 0) return { stop_reason: "stop_sequence", stop_sequence: matched };
  return { stop_reason: "end_turn", stop_sequence: null };
}

/**
 * A chat `usage` as Anthropic counts it: cache reads are apart from
 * `input_tokens` (OpenAI's `prompt_tokens` includes its `cached_tokens`).
 * `cache_read_input_tokens` is null when the engine does not say.
 */
export function usageOf(usage: unknown): AnthropicUsage {
  const u = (usage ?? {}) as { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } | null };
  const cachedRaw = u.prompt_tokens_details?.cached_tokens;
  const cached = typeof cachedRaw === "number" && cachedRaw >= 0 ? cachedRaw : null;
  return {
    input_tokens: Math.max(0, num(u.prompt_tokens) - (cached ?? 0)),
    output_tokens: num(u.completion_tokens),
    cache_creation_input_tokens: null,
    cache_read_input_tokens: cached,
    server_tool_use: null,
    service_tier: null,
  };
}

/** usageOf's inverse: a message's usage in chat completion terms (what a batch's totals read). */
export function chatUsageOf(usage: unknown): { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } | null } {
  const u = (usage ?? {}) as { input_tokens?: unknown; output_tokens?: unknown; cache_read_input_tokens?: unknown };
  const cached = typeof u.cache_read_input_tokens === "number" && u.cache_read_input_tokens >= 0 ? u.cache_read_input_tokens : null;
  return { prompt_tokens: num(u.input_tokens) + (cached ?? 0), completion_tokens: num(u.output_tokens), prompt_tokens_details: cached === null ? null : { cached_tokens: cached } };
}

/** A tool call's `arguments` (JSON text) as the `input` object of a tool_use block; anything that is not an object is {}. */
export function toolInput(args: unknown): Json {
  if (typeof args !== "string" || args.trim() === "") return {};
  try {
    const v = JSON.parse(args);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
}

/** The text of a chat message's content: a string, or its text parts. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let s = "";
  for (const p of content) if (p && typeof p === "object" && typeof (p as { text?: unknown }).text === "string") s += (p as { text: string }).text;
  return s;
}

/** The `message` answering a Messages request, from the chat completion that answered its translation (./request.ts). */
export function toMessage(completion: unknown, opts: MessageOptions = {}): AnthropicMessage {
  const c = (completion ?? {}) as { model?: unknown; choices?: unknown; usage?: unknown };
  const choice = (Array.isArray(c.choices) ? c.choices[0] : undefined) as { message?: Json; finish_reason?: unknown; stop_reason?: unknown } | undefined;
  const message = choice?.message ?? {};
  const content: ContentBlock[] = [];
  const text = contentText(message.content);
  if (text !== "") content.push({ type: "text", text, citations: null });
  const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as { id?: unknown; function?: { name?: unknown; arguments?: unknown } }[]) : [];
  for (const call of calls)
    content.push({
      type: "tool_use",
      id: typeof call?.id === "string" ? call.id : `toolu_${base62(24)}`,
      name: typeof call?.function?.name === "string" ? call.function.name : "",
      input: toolInput(call?.function?.arguments),
    });
  return {
    id: opts.id ?? newId("msg_"),
    type: "message",
    role: "assistant",
    model: opts.model ?? (typeof c.model === "string" ? c.model : ""),
    content,
    ...stopReasonOf(choice?.finish_reason, choice?.stop_reason, calls.length > 0),
    stop_details: null,
    container: null,
    usage: usageOf(c.usage),
  };
}

// Anthropic's Messages request → the Chat Completions request that answers
// it (docs/CONTRACT.md §22). Pure: no server state, so the batch runner may
// use it too. Refuses what it cannot translate with a 400 naming the field,
// as the route's other checks do (docs/CONTRACT.md §10).
import { ApiError } from "../errors";

type Json = Record<string, unknown>;

const bad = (param: string, message: string) => new ApiError("invalid_value", `${param}: ${message}`, { param });
const isObject = (v: unknown): v is Json => v !== null && typeof v === "object" && !Array.isArray(v);
/** docs/CONTRACT.md §1: a field sent as null counts as not given. */
const given = (v: unknown) => v !== undefined && v !== null;

export interface ChatRequestOptions {
  /** count_tokens takes no max_tokens: false there. Default true (POST /v1/messages requires it). */
  requireMaxTokens?: boolean;
}

/**
 * The chat completion request for a Messages request `params`: `system`
 * becomes the first message; content blocks become chat content (text,
 * images as `image_url` parts, `tool_use` as the assistant's `tool_calls`,
 * each `tool_result` as a `tool` message placed before the rest of its user
 * turn); `max_tokens`, `stop_sequences` (→ `stop`), `temperature`, `top_p`,
 * `top_k` (engines such as vLLM take it; the built-in models ignore it),
 * `tools` (→ function tools), `tool_choice` (auto → "auto", any →
 * "required", tool → that function, none → "none";
 * disable_parallel_tool_use → parallel_tool_calls: false) and `stream`
 * (which also asks for the usage chunk). `metadata` and fields the chat
 * API has no use for are dropped.
 */
export function toChatRequest(params: Json, opts: ChatRequestOptions = {}): Json {
  if (typeof params.model !== "string" || params.model.length === 0) throw new ApiError("missing_field", "model: Field required", { param: "model" });
  const chat: Json = { model: params.model };
  const messages: Json[] = [];
  if (given(params.system)) messages.push({ role: "system", content: systemText(params.system) });
  if (!Array.isArray(params.messages)) throw given(params.messages) ? bad("messages", "must be an array") : new ApiError("missing_field", "messages: Field required", { param: "messages" });
  if (params.messages.length === 0) throw bad("messages", "must hold at least one message");
  params.messages.forEach((m, i) => messages.push(...chatMessages(m, `messages.${i}`)));
  chat.messages = messages;

  if (given(params.max_tokens)) {
    if (!Number.isSafeInteger(params.max_tokens) || (params.max_tokens as number) < 1) throw bad("max_tokens", "must be a positive integer");
    chat.max_tokens = params.max_tokens;
  } else if (opts.requireMaxTokens !== false) throw new ApiError("missing_field", "max_tokens: Field required", { param: "max_tokens" });
  if (given(params.stop_sequences)) {
    const s = params.stop_sequences;
    if (!Array.isArray(s) || !s.every((x) => typeof x === "string")) throw bad("stop_sequences", "must be an array of strings");
    if (s.length > 0) chat.stop = s;
  }
  number(params, chat, "temperature", 0, 1);
  number(params, chat, "top_p", 0, 1);
  if (given(params.top_k)) {
    if (!Number.isSafeInteger(params.top_k) || (params.top_k as number) < 0) throw bad("top_k", "must be a non-negative integer");
    chat.top_k = params.top_k;
  }
  if (given(params.tools)) {
    if (!Array.isArray(params.tools)) throw bad("tools", "must be an array");
    if (params.tools.length > 0) chat.tools = params.tools.map((t, i) => functionTool(t, `tools.${i}`));
  }
  if (given(params.tool_choice)) Object.assign(chat, toolChoice(params.tool_choice));
  if (given(params.stream)) {
    if (typeof params.stream !== "boolean") throw bad("stream", "must be a boolean");
    if (params.stream) {
      chat.stream = true;
      chat.stream_options = { include_usage: true };
    }
  }
  return chat;
}

function number(params: Json, chat: Json, name: string, min: number, max: number): void {
  const v = params[name];
  if (!given(v)) return;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) throw bad(name, `must be a number from ${min} to ${max}`);
  chat[name] = v;
}

function systemText(system: unknown): string {
  if (typeof system === "string") return system;
  if (!Array.isArray(system)) throw bad("system", "must be a string or an array of text blocks");
  return system
    .map((b, i) => {
      if (!isObject(b) || b.type !== "text" || typeof b.text !== "string") throw bad(`system.${i}`, "must be a text block ({type: \"text\", text})");
      return b.text;
    })
    .join("\n");
}

/** One Anthropic message → one or more chat messages (a user turn's tool results each become a `tool` message). */
function chatMessages(m: unknown, at: string): Json[] {
  if (!isObject(m)) throw bad(at, "must be an object with role and content");
  if (m.role !== "user" && m.role !== "assistant") throw bad(`${at}.role`, "must be \"user\" or \"assistant\"");
  if (typeof m.content === "string") return [{ role: m.role, content: m.content }];
  if (!Array.isArray(m.content)) throw bad(`${at}.content`, "must be a string or an array of content blocks");
  return m.role === "user" ? userTurn(m.content, `${at}.content`) : [assistantTurn(m.content, `${at}.content`)];
}

function userTurn(blocks: unknown[], at: string): Json[] {
  const tools: Json[] = [];
  const parts: Json[] = [];
  blocks.forEach((b, i) => {
    const here = `${at}.${i}`;
    if (!isObject(b)) throw bad(here, "must be a content block");
    if (b.type === "tool_result") {
      if (typeof b.tool_use_id !== "string" || b.tool_use_id.length === 0) throw bad(`${here}.tool_use_id`, "must be a non-empty string");
      tools.push({ role: "tool", tool_call_id: b.tool_use_id, content: toolResultText(b.content, `${here}.content`) });
    } else parts.push(userPart(b, here));
  });
  // Chat engines want the tool answers right after the assistant's calls (Anthropic puts them first in the turn too).
  if (parts.length > 0) tools.push({ role: "user", content: parts });
  return tools;
}

function userPart(b: Json, at: string): Json {
  if (b.type === "text") {
    if (typeof b.text !== "string") throw bad(`${at}.text`, "must be a string");
    return { type: "text", text: b.text };
  }
  if (b.type === "image") return { type: "image_url", image_url: { url: imageUrl(b.source, `${at}.source`) } };
  throw bad(`${at}.type`, `content blocks of type '${String(b.type).slice(0, 50)}' are not supported here (text, image, tool_result in user turns)`);
}

function imageUrl(source: unknown, at: string): string {
  if (!isObject(source)) throw bad(at, "must be an image source object");
  if (source.type === "base64") {
    if (typeof source.media_type !== "string" || typeof source.data !== "string") throw bad(at, "a base64 source needs media_type and data strings");
    return `data:${source.media_type};base64,${source.data}`;
  }
  if (source.type === "url") {
    if (typeof source.url !== "string") throw bad(`${at}.url`, "must be a string");
    return source.url;
  }
  throw bad(`${at}.type`, "must be \"base64\" or \"url\"");
}

/** A tool result's content as the text of a `tool` message: a string, or its text blocks joined (other blocks have no place there). */
function toolResultText(content: unknown, at: string): string {
  if (!given(content)) return "";
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw bad(at, "must be a string or an array of content blocks");
  const texts: string[] = [];
  content.forEach((b, i) => {
    if (!isObject(b)) throw bad(`${at}.${i}`, "must be a content block");
    if (b.type === "text" && typeof b.text === "string") texts.push(b.text);
  });
  return texts.join("\n");
}

function assistantTurn(blocks: unknown[], at: string): Json {
  let text = "";
  const calls: Json[] = [];
  blocks.forEach((b, i) => {
    const here = `${at}.${i}`;
    if (!isObject(b)) throw bad(here, "must be a content block");
    if (b.type === "text") {
      if (typeof b.text !== "string") throw bad(`${here}.text`, "must be a string");
      text += b.text;
    } else if (b.type === "tool_use") {
      if (typeof b.id !== "string" || typeof b.name !== "string") throw bad(here, "a tool_use block needs id and name strings");
      calls.push({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
    } else if (b.type !== "thinking" && b.type !== "redacted_thinking") {
      // Thinking blocks are the model's own notes, sent back for Anthropic's models only: dropped.
      throw bad(`${here}.type`, `content blocks of type '${String(b.type).slice(0, 50)}' are not supported here (text, tool_use in assistant turns)`);
    }
  });
  const out: Json = { role: "assistant", content: calls.length > 0 && text === "" ? null : text };
  if (calls.length > 0) out.tool_calls = calls;
  return out;
}

function functionTool(t: unknown, at: string): Json {
  if (!isObject(t)) throw bad(at, "must be a tool object");
  // Client tools only: Anthropic's server tools (web search, code execution, …) have a versioned type.
  if (given(t.type) && t.type !== "custom") throw bad(`${at}.type`, `tools of type '${String(t.type).slice(0, 50)}' are not supported here (only client tools with an input_schema)`);
  if (typeof t.name !== "string" || t.name.length === 0) throw bad(`${at}.name`, "must be a non-empty string");
  if (!isObject(t.input_schema)) throw bad(`${at}.input_schema`, "must be a JSON Schema object");
  const fn: Json = { name: t.name, parameters: t.input_schema };
  if (typeof t.description === "string") fn.description = t.description;
  return { type: "function", function: fn };
}

function toolChoice(c: unknown): Json {
  if (!isObject(c)) throw bad("tool_choice", "must be an object with a type");
  const out: Json = {};
  switch (c.type) {
    case "auto":
      out.tool_choice = "auto";
      break;
    case "any":
      out.tool_choice = "required";
      break;
    case "none":
      out.tool_choice = "none";
      break;
    case "tool":
      if (typeof c.name !== "string" || c.name.length === 0) throw bad("tool_choice.name", "must be a non-empty string");
      out.tool_choice = { type: "function", function: { name: c.name } };
      break;
    default:
      throw bad("tool_choice.type", "must be one of auto, any, tool, none");
  }
  if (c.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  return out;
}

// offpeak-echo on the Responses API (docs/CONTRACT.md §13): the answer is the last user
// text of `input` (a string input is one user message; several text parts
// join with "\n", as in chat), in one assistant `message` item, after a
// `reasoning` item when `reasoning.effort` asks for one. Deterministic: the
// same request gives the same answer (apart from ids and times). Plain and
// streamed answers are built from the same plan; offpeak stores no responses.
import { ApiError } from "../../errors";
import { ECHO_MODEL, REASONING_EFFORTS, reasoningText, truncate } from "./echo";
import { paceSleep, type Pace } from "./echoStream";
import { contentText, countTokens, tokenize } from "./tokens";

/** Draws ids: an IdStream (batch Workers, the route's own). */
export interface Ids {
  next(prefix: string): string;
}

export interface ResponsePlan {
  /** The message text, cut to the budget. */
  text: string;
  tokens: number;
  reasoning: { text: string; tokens: number } | null;
  inputTokens: number;
  /** max_output_tokens cut the answer (or its reasoning). */
  incomplete: boolean;
}

const ROLES = new Set(["user", "assistant", "system", "developer"]);

const bad = (param: string, message: string) => new ApiError("invalid_value", message, { param });

/** The last user text of `input` and the input's tokens (each message's text plus 3 for its framing, as chat counts). Throws naming the field. */
function readInput(input: unknown): { lastUser: string; tokens: number } {
  if (input === undefined || input === null) throw new ApiError("missing_field", "input is required", { param: "input" });
  if (typeof input === "string") return { lastUser: input, tokens: countTokens(input) + 3 };
  if (!Array.isArray(input) || input.length === 0) throw bad("input", "input must be a string or a non-empty array of input items");
  let lastUser = "";
  let tokens = 0;
  for (let i = 0; i < input.length; i++) {
    const item = input[i] as Record<string, unknown> | null;
    if (!item || typeof item !== "object" || Array.isArray(item)) throw bad(`input[${i}]`, `input[${i}] must be an object`);
    const type = item.type;
    if (type === undefined || type === null || type === "message") {
      if (typeof item.role !== "string" || !ROLES.has(item.role)) throw bad(`input[${i}].role`, `input[${i}].role must be one of ${[...ROLES].join(", ")}`);
      const content = item.content;
      if (typeof content !== "string" && !Array.isArray(content)) throw bad(`input[${i}].content`, `input[${i}].content must be a string or an array of content parts`);
      const text = contentText(content);
      tokens += countTokens(text) + 3;
      if (item.role === "user") lastUser = text;
    } else if (typeof type !== "string") throw bad(`input[${i}].type`, `input[${i}].type must be a string`);
    else tokens += otherItemTokens(item);
  }
  return { lastUser, tokens };
}

/** Tool calls and their outputs count by their text; other items (reasoning, references) by nothing. */
function otherItemTokens(item: Record<string, unknown>): number {
  let n = 0;
  for (const v of [item.arguments, item.output, item.input]) if (typeof v === "string") n += countTokens(v);
  return n;
}

/**
 * The input tokens of a Responses request as offpeak counts them, for an
 * upstream model's rate limits: never throws (the upstream judges the body).
 */
export function responseInputTokens(body: Record<string, unknown>): number {
  let n = typeof body.instructions === "string" ? countTokens(body.instructions) + 3 : 0;
  const input = body.input;
  if (typeof input === "string") return n + countTokens(input) + 3;
  if (Array.isArray(input))
    for (const item of input) {
      if (!item || typeof item !== "object") continue;
      const it = item as Record<string, unknown>;
      if (typeof it.role === "string") n += countTokens(contentText(it.content)) + 3;
      else n += otherItemTokens(it);
    }
  return n;
}

const EFFORTS = new Set(["none", ...REASONING_EFFORTS]);

/** Works out what offpeak-echo answers; checks every field it reads (400 naming it). */
export function planResponse(body: Record<string, unknown>): ResponsePlan {
  // offpeak keeps no responses or conversations: there is nothing to continue.
  if (body.previous_response_id !== undefined && body.previous_response_id !== null)
    throw bad("previous_response_id", "offpeak-echo stores no responses, so previous_response_id cannot be used: send the whole conversation in input");
  if (body.conversation !== undefined && body.conversation !== null)
    throw bad("conversation", "offpeak-echo stores no conversations, so conversation cannot be used: send the whole conversation in input");
  const { lastUser, tokens } = readInput(body.input);
  const instructions = body.instructions;
  if (instructions !== undefined && instructions !== null && typeof instructions !== "string") throw bad("instructions", "instructions must be a string");
  const max = body.max_output_tokens;
  if (max !== undefined && max !== null && (!Number.isInteger(max) || (max as number) < 1)) throw bad("max_output_tokens", "max_output_tokens must be a positive integer");
  for (const [name, lo, hi] of [
    ["temperature", 0, 2],
    ["top_p", 0, 1],
  ] as const) {
    const v = body[name];
    if (v !== undefined && v !== null && (typeof v !== "number" || !Number.isFinite(v) || v < lo || v > hi)) throw bad(name, `${name} must be a number from ${lo} to ${hi}`);
  }
  const effort = effortOf(body.reasoning);
  const budget = typeof max === "number" ? max : Infinity;
  let incomplete = false;
  let reasoning: ResponsePlan["reasoning"] = null;
  if (effort !== null && effort !== "none") {
    const text = reasoningText(lastUser, effort);
    const full = countTokens(text);
    reasoning = truncate(text, full, budget);
    if (reasoning.tokens < full) incomplete = true;
  }
  // Reasoning counts against max_output_tokens, as OpenAI counts it.
  const full = countTokens(lastUser);
  const cut = truncate(lastUser, full, Math.max(0, budget - (reasoning?.tokens ?? 0)));
  if (cut.tokens < full) incomplete = true;
  const inputTokens = tokens + (typeof instructions === "string" ? countTokens(instructions) + 3 : 0);
  return { text: cut.text, tokens: cut.tokens, reasoning, inputTokens, incomplete };
}

function effortOf(reasoning: unknown): string | null {
  if (reasoning === undefined || reasoning === null) return null;
  if (typeof reasoning !== "object" || Array.isArray(reasoning)) throw bad("reasoning", "reasoning must be an object");
  const effort = (reasoning as { effort?: unknown }).effort;
  if (effort === undefined || effort === null) return null;
  if (typeof effort !== "string" || !EFFORTS.has(effort)) throw bad("reasoning.effort", `reasoning.effort must be one of ${[...EFFORTS].join(", ")}`);
  return effort;
}

export function responseUsage(plan: ResponsePlan) {
  const reasoning = plan.reasoning?.tokens ?? 0;
  const output = plan.tokens + reasoning;
  return {
    input_tokens: plan.inputTokens,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: plan.inputTokens + output,
  };
}

/** The ids and time of one answer, drawn once so the streamed events and the final object agree. */
export interface ResponseIds {
  id: string;
  messageId: string;
  reasoningId: string | null;
  created: number;
}

export function responseIds(ids: Ids, plan: ResponsePlan, created: number): ResponseIds {
  return { id: ids.next("resp_"), messageId: ids.next("msg_"), reasoningId: plan.reasoning ? ids.next("rs_") : null, created };
}

type Status = "in_progress" | "completed" | "incomplete";

// The finished response object is written as JSON text by hand, not built
// and passed to JSON.stringify: a batch of 1M Responses lines spends most of
// its time serialising them (an answer is ≈1.1 KB, ≈1.7× a chat.completion),
// and the template, which only stringifies the request's own values, cost
// ≈1 µs a line where building and stringifying the object cost ≈3.4 µs. One
// template literal, with the message and usage inline: parse, answer, join
// and write took 4.2–5.3 µs a line against 4.9–6.3 µs when the same text was
// made of `+` chains or nested templates (a chat line: 4.85–5.0 µs).
// echoResponse parses it; test/responses.test.ts checks the shape field by
// field, and that the streamed start object has the same fields.
const j = JSON.stringify;
/** A value from the request as JSON, or `absent` (already JSON) when it is missing or null. */
const or = (v: unknown, absent: string) => (v === undefined || v === null ? absent : j(v));
const TEXT_FORMAT = j({ format: { type: "text" } });
const DEFAULT_SETTINGS = `"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1,"text":${TEXT_FORMAT},"tool_choice":"auto","tools":[],"top_p":1,"truncation":"disabled"`;

/**
 * The finished response object as JSON text (the plain answer, a batch
 * line's body): what the request asked for echoed back (as OpenAI does),
 * `output` and `usage`. `store` is false whatever the request asked: nothing
 * is kept. `completedAt`: a batch line completes when it is made.
 */
export function echoResponseJson(body: Record<string, unknown>, r: ResponseIds, plan: ResponsePlan, usage = responseUsage(plan), completedAt = r.created): string {
  const status: Status = plan.incomplete ? "incomplete" : "completed";
  const reasoning = body.reasoning as { effort?: unknown; summary?: unknown } | null | undefined;
  const thought = plan.reasoning ? `{"id":"${r.reasoningId}","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":${j(plan.reasoning.text)}}]},` : "";
  // prettier-ignore
  return `{"id":"${r.id}","object":"response","created_at":${r.created},"status":"${status}","background":false,"completed_at":${status === "completed" ? completedAt : "null"},"error":null,"incomplete_details":${status === "incomplete" ? '{"reason":"max_output_tokens"}' : "null"},"instructions":${or(body.instructions, "null")},"max_output_tokens":${or(body.max_output_tokens, "null")},"model":"${ECHO_MODEL}","output":[${thought}{"id":"${r.messageId}","type":"message","status":"${status}","role":"assistant","content":[{"type":"output_text","text":${j(plan.text)},"annotations":[],"logprobs":[]}]}],${settingsJson(body, reasoning)},"usage":{"input_tokens":${usage.input_tokens},"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":${usage.output_tokens},"output_tokens_details":{"reasoning_tokens":${usage.output_tokens_details.reasoning_tokens}},"total_tokens":${usage.total_tokens}},"user":${or(body.user, "null")},"metadata":${or(body.metadata, "{}")}}`;
}

/** The settings a request may set, from parallel_tool_calls to truncation; a request that sets none (most batch lines) gets them as one constant. */
function settingsJson(body: Record<string, unknown>, reasoning: { effort?: unknown; summary?: unknown } | null | undefined): string {
  if (
    reasoning == null &&
    body.parallel_tool_calls == null &&
    body.temperature == null &&
    body.text == null &&
    body.tool_choice == null &&
    body.tools == null &&
    body.top_p == null &&
    body.truncation == null
  )
    return DEFAULT_SETTINGS;
  // prettier-ignore
  return `"parallel_tool_calls":${or(body.parallel_tool_calls, "true")},"previous_response_id":null,"reasoning":{"effort":${or(reasoning?.effort, "null")},"summary":${or(reasoning?.summary, "null")}},"store":false,"temperature":${or(body.temperature, "1")},"text":${or(body.text, TEXT_FORMAT)},"tool_choice":${or(body.tool_choice, '"auto"')},"tools":${or(body.tools, "[]")},"top_p":${or(body.top_p, "1")},"truncation":${or(body.truncation, '"disabled"')}`;
}

/** The finished response object (the last event of a stream). */
export const echoResponse = (body: Record<string, unknown>, r: ResponseIds, plan: ResponsePlan, completedAt = r.created) =>
  JSON.parse(echoResponseJson(body, r, plan, responseUsage(plan), completedAt));

/** The response object of response.created / response.in_progress: the finished one's fields, no output, no usage yet. */
function startedResponse(body: Record<string, unknown>, r: ResponseIds) {
  const reasoning = body.reasoning as { effort?: unknown; summary?: unknown } | null | undefined;
  return {
    id: r.id,
    object: "response",
    created_at: r.created,
    status: "in_progress",
    background: false,
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: ECHO_MODEL,
    output: [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: reasoning?.effort ?? null, summary: reasoning?.summary ?? null },
    store: false,
    temperature: body.temperature ?? 1,
    text: body.text ?? { format: { type: "text" } },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    truncation: body.truncation ?? "disabled",
    usage: null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  };
}

const outputText = (text: string) => ({ type: "output_text" as const, text, annotations: [], logprobs: [] });
const reasoningItem = (id: string, text: string | null) => ({ id, type: "reasoning" as const, summary: [], content: text === null ? [] : [{ type: "reasoning_text" as const, text }] });
const messageItem = (id: string, status: Status, content: unknown[]) => ({ id, type: "message" as const, status, role: "assistant" as const, content });

/**
 * The Responses event stream: response.created, response.in_progress, the
 * reasoning item's events (if any), the message item's (output_item.added,
 * content_part.added, one output_text.delta per token, output_text.done,
 * content_part.done, output_item.done), then response.completed or
 * response.incomplete. Every event has a rising sequence_number. Simulated
 * speed (latency_ms, tokens_per_second) applies between deltas.
 */
export async function* responseEvents(body: Record<string, unknown>, r: ResponseIds, plan: ResponsePlan, pace: Pace, signal: AbortSignal): AsyncGenerator<Record<string, unknown>> {
  let seq = 0;
  const event = (type: string, fields: Record<string, unknown>) => ({ type, sequence_number: seq++, ...fields });
  const gap = pace.tokensPerSecond > 0 ? 1000 / pace.tokensPerSecond : 0;
  const started = startedResponse(body, r);
  yield event("response.created", { response: started });
  yield event("response.in_progress", { response: started });
  await paceSleep(pace.latencyMs, signal);
  let index = 0;
  if (plan.reasoning) {
    const id = r.reasoningId!;
    const where = { item_id: id, output_index: index, content_index: 0 };
    yield event("response.output_item.added", { output_index: index, item: reasoningItem(id, null) });
    yield event("response.content_part.added", { ...where, part: { type: "reasoning_text", text: "" } });
    for (const tok of tokenize(plan.reasoning.text)) {
      if (signal.aborted) return;
      await paceSleep(gap, signal);
      yield event("response.reasoning_text.delta", { ...where, delta: tok });
    }
    yield event("response.reasoning_text.done", { ...where, text: plan.reasoning.text });
    yield event("response.content_part.done", { ...where, part: { type: "reasoning_text", text: plan.reasoning.text } });
    yield event("response.output_item.done", { output_index: index, item: reasoningItem(id, plan.reasoning.text) });
    index++;
  }
  const status: Status = plan.incomplete ? "incomplete" : "completed";
  const where = { item_id: r.messageId, output_index: index, content_index: 0 };
  yield event("response.output_item.added", { output_index: index, item: messageItem(r.messageId, "in_progress", []) });
  yield event("response.content_part.added", { ...where, part: outputText("") });
  for (const tok of tokenize(plan.text)) {
    if (signal.aborted) return;
    await paceSleep(gap, signal);
    yield event("response.output_text.delta", { ...where, delta: tok, logprobs: [] });
  }
  yield event("response.output_text.done", { ...where, text: plan.text, logprobs: [] });
  yield event("response.content_part.done", { ...where, part: outputText(plan.text) });
  yield event("response.output_item.done", { output_index: index, item: messageItem(r.messageId, status, [outputText(plan.text)]) });
  yield event(plan.incomplete ? "response.incomplete" : "response.completed", { response: echoResponse(body, r, plan, Math.floor(Date.now() / 1000)) });
}

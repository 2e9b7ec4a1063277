// offpeak-echo: a deterministic chat model that answers with the last user
// message. Used for tests, demos and benchmarks of the machinery around a
// model. Pure: the same request gives the same answer (apart from ids/time).
import { ApiError } from "../../errors";
import { contentText, countTokens, tokenize } from "./tokens";

export const ECHO_MODEL = "offpeak-echo";

export interface ChatMessage {
  role: string;
  content?: unknown;
}

export interface EchoPlan {
  /** Per choice: the reply, its token count, and why it stopped. */
  choices: { text: string; tokens: number; finish: "stop" | "length" }[];
  reasoning: { text: string; tokens: number } | null;
  promptTokens: number;
  /** The `stop` string that cut the reply, if one did: sent as the choice's `stop_reason`, as vLLM does (Anthropic's stop_sequence reads it). */
  stoppedBy?: string;
}

const REASONING_STEPS: Record<string, number> = { minimal: 1, low: 2, medium: 4, high: 8 };

/** Works out what offpeak-echo will say; both the plain and streamed answers are built from this. */
export function planEcho(body: Record<string, unknown>): EchoPlan {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw new ApiError("invalid_value", "messages must be a non-empty array", { param: "messages" });
  let promptTokens = 0;
  let lastUser = "";
  for (const m of messages as ChatMessage[]) {
    if (!m || typeof m !== "object" || typeof m.role !== "string") throw new ApiError("invalid_value", "each message needs a role", { param: "messages" });
    // Content is text, an array of parts, or null/absent (e.g. an assistant tool call);
    // a number or an object is refused, not read as an empty message.
    if (m.content !== undefined && m.content !== null && typeof m.content !== "string" && !Array.isArray(m.content))
      throw new ApiError("invalid_value", "message content must be a string or an array of content parts", { param: "messages" });
    const text = contentText(m.content);
    // 3 tokens of framing per message, as OpenAI's chat format counts.
    promptTokens += countTokens(text) + 3;
    if (m.role === "user") lastUser = text;
  }
  const n = body.n === undefined || body.n === null ? 1 : body.n;
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > 128) throw new ApiError("invalid_value", "n must be an integer from 1 to 128", { param: "n" });
  // Each limit is checked under its own name, so the error's param is the
  // field that is wrong: {"max_completion_tokens":null,"max_tokens":0} blames
  // max_tokens, {"max_completion_tokens":"abc"} max_completion_tokens.
  for (const name of ["max_completion_tokens", "max_tokens"]) {
    const v = body[name];
    if (v !== undefined && v !== null && (!Number.isInteger(v) || (v as number) < 1)) throw new ApiError("invalid_value", `${name} must be a positive integer`, { param: name });
  }
  const maxRaw = body.max_completion_tokens ?? body.max_tokens;
  checkSampling(body);
  let reply = lastUser;
  let finish: "stop" | "length" = "stop";
  let stoppedBy: string | undefined;
  const stops = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? (body.stop as unknown[]).filter((s): s is string => typeof s === "string" && s.length > 0) : [];
  for (const s of stops) {
    const i = reply.indexOf(s);
    // Each cut is earlier than the ones before it: the last stop to cut is the first to occur.
    if (i !== -1) {
      reply = reply.slice(0, i);
      stoppedBy = s;
    }
  }
  let reasoning: EchoPlan["reasoning"] = null;
  const effort = body.reasoning_effort;
  if (typeof effort === "string" && effort !== "none") {
    const text = reasoningText(lastUser, effort); // checkSampling let only known values through
    const reasoningTokens = countTokens(text);
    reasoning = truncate(text, reasoningTokens, typeof maxRaw === "number" ? maxRaw : Infinity);
    // The limit was hit in the reasoning: the reply (perhaps empty) is cut too (docs/CONTRACT.md §6: finish_reason length).
    if (reasoning.tokens < reasoningTokens) finish = "length";
  }
  // Only a reply that is cut needs splitting into tokens (the batch hot path rarely is).
  const budget = typeof maxRaw === "number" ? Math.max(0, maxRaw - (reasoning?.tokens ?? 0)) : Infinity;
  const full = countTokens(reply);
  const cut = truncate(reply, full, budget);
  if (cut.tokens < full) finish = "length";
  const choices = Array.from({ length: n as number }, () => ({ text: cut.text, tokens: cut.tokens, finish }));
  return finish === "stop" && stoppedBy !== undefined ? { choices, reasoning, promptTokens, stoppedBy } : { choices, reasoning, promptTokens };
}

/** The deterministic reasoning offpeak-echo does before it answers `lastUser`, at a known `effort` (minimal…high). */
export function reasoningText(lastUser: string, effort: string): string {
  const steps = REASONING_STEPS[effort]!;
  const words = countTokens(lastUser);
  const lines = [`The user wrote ${words} token${words === 1 ? "" : "s"}.`, "The task is to repeat the message exactly."];
  for (let i = 2; i < steps; i++) lines.push(`Check ${i - 1}: the reply matches the message.`);
  return lines.slice(0, Math.max(1, steps)).join(" ");
}

export const REASONING_EFFORTS = Object.keys(REASONING_STEPS);

/**
 * The echo model ignores sampling, but a request OpenAI would refuse must not
 * succeed here (docs/CONTRACT.md §10: bad types → 400 naming the param). null = not given.
 */
export function checkSampling(body: Record<string, unknown>): void {
  const range = (name: string, min: number, max: number) => {
    const v = body[name];
    if (v === undefined || v === null) return;
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) throw new ApiError("invalid_value", `${name} must be a number from ${min} to ${max}`, { param: name });
  };
  range("temperature", 0, 2);
  range("top_p", 0, 1);
  range("presence_penalty", -2, 2);
  range("frequency_penalty", -2, 2);
  const stop = body.stop;
  if (stop !== undefined && stop !== null && typeof stop !== "string" && !(Array.isArray(stop) && stop.every((s) => typeof s === "string")))
    throw new ApiError("invalid_value", "stop must be a string or an array of strings", { param: "stop" });
  // OpenAI refuses a value it does not know; so does offpeak, rather than guess one.
  const effort = body.reasoning_effort;
  if (effort !== undefined && effort !== null && effort !== "none" && !(typeof effort === "string" && Object.hasOwn(REASONING_STEPS, effort)))
    throw new ApiError("invalid_value", `reasoning_effort must be one of none, ${Object.keys(REASONING_STEPS).join(", ")}`, { param: "reasoning_effort" });
}

export function truncate(text: string, tokens: number, budget: number): { text: string; tokens: number } {
  if (tokens <= budget) return { text, tokens };
  return { text: tokenize(text).slice(0, budget).join(""), tokens: budget };
}

export function echoUsage(plan: EchoPlan) {
  const reasoningTokens = plan.reasoning?.tokens ?? 0;
  let completion = 0;
  for (const c of plan.choices) completion += c.tokens + reasoningTokens;
  return {
    prompt_tokens: plan.promptTokens,
    completion_tokens: completion,
    total_tokens: plan.promptTokens + completion,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: reasoningTokens * plan.choices.length },
  };
}

/** The non-streamed chat.completion object. */
export function echoCompletion(body: Record<string, unknown>, id: string, created: number, plan: EchoPlan = planEcho(body)) {
  const reasoning = plan.reasoning ? plan.reasoning.text : null;
  return {
    id,
    object: "chat.completion" as const,
    created,
    model: ECHO_MODEL,
    choices: plan.choices.map((c, index) => ({
      index,
      message: reasoning === null ? { role: "assistant", content: c.text, refusal: null } : { role: "assistant", content: c.text, reasoning_content: reasoning, refusal: null },
      logprobs: null,
      finish_reason: c.finish,
      ...(plan.stoppedBy === undefined ? {} : { stop_reason: plan.stoppedBy }),
    })),
    usage: echoUsage(plan),
    system_fingerprint: "offpeak-echo",
  };
}

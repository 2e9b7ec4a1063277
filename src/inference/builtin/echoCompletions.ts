// offpeak-echo on the legacy Completions API (docs/CONTRACT.md §13): each prompt's
// completion is the prompt's own text, cut at the first `stop` and at
// `max_tokens`; `n` choices per prompt (a prompt array gives choices
// prompt by prompt, index = prompt·n + k, as OpenAI numbers them); `echo`
// puts the prompt before the completion. No default max_tokens: OpenAI's 16
// would cut most echoes, and the echo model is for seeing what was sent.
import { ApiError } from "../../errors";
import { ECHO_MODEL, checkSampling, truncate } from "./echo";
import { paceSleep, type Pace } from "./echoStream";
import { countTokens, tokenize } from "./tokens";

export interface CompletionPlan {
  prompts: string[];
  /** Per choice, in index order: the completion (without the echoed prompt), its tokens, why it stopped, and its prompt. */
  choices: { prompt: number; text: string; tokens: number; finish: "stop" | "length" }[];
  echo: boolean;
  promptTokens: number;
}

const bad = (param: string, message: string) => new ApiError("invalid_value", message, { param });
const PROMPT_MESSAGE = "prompt must be a string, an array of strings, an array of token ids, or an array of token-id arrays";
const isTokenId = (t: unknown): t is number => Number.isSafeInteger(t) && (t as number) >= 0;
/** Token ids have no text here: each stands as the word "t<id>" (as offpeak-embed reads them). */
const tokenText = (ids: number[]) => ids.map((t) => `t${t}`).join(" ");

/** The texts of `prompt` (string | string[] | number[] | number[][]). Throws naming `prompt`. */
export function promptTexts(prompt: unknown): string[] {
  if (prompt === undefined || prompt === null) throw new ApiError("missing_field", "prompt is required", { param: "prompt" });
  if (typeof prompt === "string") return [prompt];
  if (!Array.isArray(prompt) || prompt.length === 0) throw bad("prompt", PROMPT_MESSAGE);
  if (prompt.every((p) => typeof p === "number")) {
    if (!prompt.every(isTokenId)) throw bad("prompt", PROMPT_MESSAGE);
    return [tokenText(prompt)];
  }
  return prompt.map((p) => {
    if (typeof p === "string") return p;
    if (Array.isArray(p) && p.length > 0 && p.every(isTokenId)) return tokenText(p);
    throw bad("prompt", PROMPT_MESSAGE);
  });
}

/** The prompt tokens of a Completions request, for an upstream model's rate limits (its texts are checked by promptTexts first). */
export const promptTokensOfTexts = (texts: string[]) => texts.reduce((n, t) => n + countTokens(t), 0);

export function planCompletion(body: Record<string, unknown>, prompts: string[] = promptTexts(body.prompt)): CompletionPlan {
  const n = body.n ?? 1;
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > 128) throw bad("n", "n must be an integer from 1 to 128");
  const max = body.max_tokens;
  // 0 is allowed: with echo, it asks for the prompt alone.
  if (max !== undefined && max !== null && (!Number.isInteger(max) || (max as number) < 0)) throw bad("max_tokens", "max_tokens must be a non-negative integer");
  const echo = body.echo;
  if (echo !== undefined && echo !== null && typeof echo !== "boolean") throw bad("echo", "echo must be a boolean");
  checkSampling(body); // temperature, top_p, penalties, stop
  const stops = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? (body.stop as string[]).filter((s) => s.length > 0) : [];
  const budget = typeof max === "number" ? max : Infinity;
  const choices: CompletionPlan["choices"] = [];
  let promptTokens = 0;
  prompts.forEach((prompt, p) => {
    promptTokens += countTokens(prompt);
    let text = prompt;
    for (const s of stops) {
      const i = text.indexOf(s);
      if (i !== -1) text = text.slice(0, i);
    }
    const full = countTokens(text);
    const cut = truncate(text, full, budget);
    const finish = cut.tokens < full ? "length" : "stop";
    for (let k = 0; k < (n as number); k++) choices.push({ prompt: p, text: cut.text, tokens: cut.tokens, finish });
  });
  return { prompts, choices, echo: echo === true, promptTokens };
}

export function completionUsage(plan: CompletionPlan) {
  let completion = 0;
  for (const c of plan.choices) completion += c.tokens;
  return { prompt_tokens: plan.promptTokens, completion_tokens: completion, total_tokens: plan.promptTokens + completion };
}

/** The text_completion object. */
export function echoTextCompletion(id: string, created: number, plan: CompletionPlan) {
  return {
    id,
    object: "text_completion" as const,
    created,
    model: ECHO_MODEL,
    choices: plan.choices.map((c, index) => ({ text: plan.echo ? plan.prompts[c.prompt] + c.text : c.text, index, logprobs: null, finish_reason: c.finish })),
    usage: completionUsage(plan),
    system_fingerprint: "offpeak-echo",
  };
}

/**
 * Streamed: the echoed prompts first (with `echo`), then one chunk per token
 * position holding every choice that has a token there, then the
 * finish_reason chunk, then (with stream_options.include_usage) a usage chunk.
 */
export async function* completionChunks(body: Record<string, unknown>, id: string, created: number, plan: CompletionPlan, pace: Pace, signal: AbortSignal): AsyncGenerator<Record<string, unknown>> {
  const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
  const base = { id, object: "text_completion", created, model: ECHO_MODEL, system_fingerprint: "offpeak-echo" };
  const chunk = (choices: unknown[]) => (includeUsage ? { ...base, choices, usage: null } : { ...base, choices });
  const choice = (index: number, text: string, finish: string | null = null) => ({ text, index, logprobs: null, finish_reason: finish });
  const gap = pace.tokensPerSecond > 0 ? 1000 / pace.tokensPerSecond : 0;
  await paceSleep(pace.latencyMs, signal);
  if (plan.echo) yield chunk(plan.choices.map((c, index) => choice(index, plan.prompts[c.prompt]!)));
  const tokens = plan.choices.map((c) => tokenize(c.text));
  const longest = Math.max(0, ...tokens.map((t) => t.length));
  for (let i = 0; i < longest; i++) {
    if (signal.aborted) return;
    await paceSleep(gap, signal);
    yield chunk(tokens.flatMap((t, index) => (i < t.length ? [choice(index, t[i]!)] : [])));
  }
  yield chunk(plan.choices.map((c, index) => choice(index, "", c.finish)));
  if (includeUsage) yield { ...base, choices: [], usage: completionUsage(plan) };
}

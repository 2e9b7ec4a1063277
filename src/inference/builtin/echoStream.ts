// offpeak-echo, streamed: a role chunk, then reasoning deltas (if
// reasoning_effort), then one content delta per token, then finish_reason,
// then (with stream_options.include_usage) a usage chunk. Simulated speed
// (latency_ms, tokens_per_second) applies between chunks.
import { echoUsage, planEcho, ECHO_MODEL, type EchoPlan } from "./echo";
import { tokenize } from "./tokens";

export interface Pace {
  latencyMs: number;
  tokensPerSecond: number;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

export async function* echoChunks(
  body: Record<string, unknown>,
  id: string,
  created: number,
  pace: Pace,
  signal: AbortSignal,
  plan: EchoPlan = planEcho(body),
): AsyncGenerator<Record<string, unknown>> {
  const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
  const base = { id, object: "chat.completion.chunk", created, model: ECHO_MODEL, system_fingerprint: "offpeak-echo" };
  const chunk = (choices: unknown[]) => (includeUsage ? { ...base, choices, usage: null } : { ...base, choices });
  const gap = pace.tokensPerSecond > 0 ? 1000 / pace.tokensPerSecond : 0;
  await sleep(pace.latencyMs, signal);
  yield chunk(plan.choices.map((_, index) => ({ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null })));
  for (const tok of plan.reasoning ? tokenize(plan.reasoning.text) : []) {
    if (signal.aborted) return;
    await sleep(gap, signal);
    yield chunk(plan.choices.map((_, index) => ({ index, delta: { reasoning_content: tok }, logprobs: null, finish_reason: null })));
  }
  const tokens = plan.choices.map((c) => tokenize(c.text));
  const longest = Math.max(0, ...tokens.map((t) => t.length));
  for (let i = 0; i < longest; i++) {
    if (signal.aborted) return;
    await sleep(gap, signal);
    yield chunk(tokens.flatMap((t, index) => (i < t.length ? [{ index, delta: { content: t[i] }, logprobs: null, finish_reason: null }] : [])));
  }
  const stopped = plan.stoppedBy === undefined ? {} : { stop_reason: plan.stoppedBy };
  yield chunk(plan.choices.map((c, index) => ({ index, delta: {}, logprobs: null, finish_reason: c.finish, ...stopped })));
  if (includeUsage) yield { ...base, choices: [], usage: echoUsage(plan) };
}

/** Non-streamed echo with the same simulated pace (latency + tokens at the rate). */
export async function pacedDelay(plan: EchoPlan, pace: Pace, signal: AbortSignal): Promise<void> {
  await pacedWait((plan.reasoning?.tokens ?? 0) + Math.max(0, ...plan.choices.map((c) => c.tokens)), pace, signal);
}

/** The simulated time to produce `tokens` tokens: the latency, then the tokens at the rate. */
export function pacedWait(tokens: number, pace: Pace, signal: AbortSignal): Promise<void> {
  return sleep(pace.latencyMs + (pace.tokensPerSecond > 0 ? (tokens * 1000) / pace.tokensPerSecond : 0), signal);
}

/** Sleeps `ms` (at once if ≤ 0), waking early when `signal` aborts. */
export { sleep as paceSleep };

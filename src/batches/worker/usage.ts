import type { PricedModel, ShardTotals } from "../types";

/** Batch requests cost half of the interactive price (SPEC §5). */
export const BATCH_DISCOUNT = 0.5;

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
  completion_tokens_details?: { reasoning_tokens?: number } | null;
}

export function addUsage(t: ShardTotals, raw: unknown, model: PricedModel | undefined): void {
  const u = raw as Usage;
  const input = num(u.prompt_tokens);
  const output = num(u.completion_tokens);
  t.inputTokens += input;
  t.outputTokens += output;
  t.cachedTokens += num(u.prompt_tokens_details?.cached_tokens);
  t.reasoningTokens += num(u.completion_tokens_details?.reasoning_tokens);
  if (model) t.costAmount += ((input * model.inputPerMillion + output * model.outputPerMillion) / 1e6) * BATCH_DISCOUNT;
}

const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);

import type { EndpointKind, TokenCounts } from "../../endpoints/kind";
import type { PricedModel, ShardTotals } from "../types";

/** Batch requests cost half of the interactive price (docs/CONTRACT.md §5). */
export const BATCH_DISCOUNT = 0.5;

/** Reused for every line: reading usage allocates nothing. */
const counts: TokenCounts = { input: 0, output: 0, cached: 0, reasoning: 0 };

/** Adds one answer's usage, read the way its endpoint's module says (Responses: input_tokens…; the others: prompt_tokens…), to a shard's totals. */
export function addUsage(t: ShardTotals, raw: unknown, model: PricedModel | undefined, kind: EndpointKind): void {
  kind.readUsage(raw, counts);
  t.inputTokens += counts.input;
  t.outputTokens += counts.output;
  t.cachedTokens += counts.cached;
  t.reasoningTokens += counts.reasoning;
  if (model) t.costAmount += ((counts.input * model.inputPerMillion + counts.output * model.outputPerMillion) / 1e6) * BATCH_DISCOUNT;
}

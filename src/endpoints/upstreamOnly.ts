// The endpoint kinds that only upstream models serve (docs/CONTRACT.md §22):
// `/v1/moderations` (OpenAI's), and vLLM's `/v1/score` and `/v1/rerank`. No
// built-in model answers them: offpeak passes each request to the model's
// engine untouched (src/upstreamOnly/routes.ts interactively, the batch
// Workers for batch lines) and reads only the `usage` of the answer. A
// built-in model named for one is refused as for any endpoint it does not
// serve (404 model_not_found interactively, `model_not_found` at batch
// validation), and a batch of one is refused at creation while no upstream
// model is configured (400 unsupported_endpoint, src/batches/service.ts).
import { ApiError } from "../errors";
import { num, type EndpointKind, type EndpointPath, type TokenCounts } from "./kind";

/** `usage` as these engines send it: prompt_tokens (vLLM's score), or only total_tokens (rerank); moderations have none. */
export function readInputUsage(raw: unknown, into: TokenCounts): void {
  const u = (raw !== null && typeof raw === "object" ? raw : {}) as { prompt_tokens?: unknown; total_tokens?: unknown; completion_tokens?: unknown };
  into.input = num(u.prompt_tokens ?? u.total_tokens);
  into.output = num(u.completion_tokens);
  into.cached = 0;
  into.reasoning = 0;
}

export interface UpstreamOnlyKind extends EndpointKind {
  /** The body fields whose text is the request's input (its tokens count against tpm). */
  readonly inputFields: readonly string[];
}

export function upstreamOnlyKind(endpoint: string, path: EndpointPath, noun: string, inputFields: readonly string[]): UpstreamOnlyKind {
  return {
    endpoint,
    path,
    builtin: null,
    noun,
    inputFields,
    // Never reached (batch validation lets no built-in model through); refused if it were.
    answer() {
      throw new ApiError("unsupported_endpoint", `No built-in model serves ${endpoint}: name an upstream model`, { param: "model" });
    },
    readUsage: readInputUsage,
  };
}

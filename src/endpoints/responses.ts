// /v1/responses: offpeak-echo answers (inference/builtin/echoResponses.ts); usage
// in the Responses shape (input_tokens, output_tokens and their details),
// mapped onto the batch's totals; a streamed upstream answer reports its
// usage in its last event (response.completed / .incomplete / .failed).
import { echoResponseJson, planResponse, responseIds, responseUsage } from "../inference/builtin/echoResponses";
import { countTokens } from "../inference/builtin/tokens";
import { SerializedAnswer, num, type EndpointKind, type StreamTally, type TokenCounts } from "./kind";

export const responses: EndpointKind = {
  endpoint: "/v1/responses",
  path: "/responses",
  builtin: "echo",
  noun: "responses",
  answer(body, ids, created) {
    const plan = planResponse(body);
    const usage = responseUsage(plan);
    return new SerializedAnswer(echoResponseJson(body, responseIds(ids, plan, created), plan, usage), usage);
  },
  readUsage: readResponsesUsage,
  readStreamEvent: readResponsesStreamEvent,
};

interface ResponsesUsage {
  input_tokens?: unknown;
  output_tokens?: unknown;
  input_tokens_details?: { cached_tokens?: unknown } | null;
  output_tokens_details?: { reasoning_tokens?: unknown } | null;
  /** Some engines answer /responses with chat-style names: read those too. */
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
}

export function readResponsesUsage(raw: unknown, into: TokenCounts): void {
  if (raw === null || typeof raw !== "object") {
    into.input = into.output = into.cached = into.reasoning = 0;
    return;
  }
  const u = raw as ResponsesUsage;
  into.input = num(u.input_tokens ?? u.prompt_tokens);
  into.output = num(u.output_tokens ?? u.completion_tokens);
  into.cached = num(u.input_tokens_details?.cached_tokens);
  into.reasoning = num(u.output_tokens_details?.reasoning_tokens);
}

/** Text deltas that are model output (audio and other binary deltas are not counted). */
const TEXT_DELTAS = new Set([
  "response.output_text.delta",
  "response.reasoning_text.delta",
  "response.reasoning_summary_text.delta",
  "response.refusal.delta",
  "response.function_call_arguments.delta",
  "response.custom_tool_call_input.delta",
]);

function readResponsesStreamEvent(event: unknown, tally: StreamTally): void {
  const e = event as { type?: unknown; delta?: unknown; response?: { usage?: { output_tokens?: unknown } | null } | null } | null;
  const type = e?.type;
  if (typeof type !== "string") return;
  if (type === "response.completed" || type === "response.incomplete" || type === "response.failed") {
    const reported = e!.response?.usage?.output_tokens;
    if (typeof reported === "number" && reported >= 0) tally.reported = reported;
  } else if (typeof e!.delta === "string" && TEXT_DELTAS.has(type)) tally.estimated += countTokens(e!.delta);
}

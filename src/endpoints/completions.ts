// /v1/completions (legacy text completions): offpeak-echo answers
// (inference/builtin/echoCompletions.ts); usage in the Chat Completions shape;
// streamed upstream answers are text_completion chunks.
import { echoTextCompletion, planCompletion } from "../inference/builtin/echoCompletions";
import { countTokens } from "../inference/builtin/tokens";
import { readChatUsage, type EndpointKind, type StreamTally } from "./kind";

export const completions: EndpointKind = {
  endpoint: "/v1/completions",
  path: "/completions",
  builtin: "echo",
  noun: "completions",
  answer: (body, ids, created) => echoTextCompletion(ids.next("cmpl-"), created, planCompletion(body)),
  readUsage: readChatUsage,
  readStreamEvent: readCompletionsStreamEvent,
};

function readCompletionsStreamEvent(event: unknown, tally: StreamTally): void {
  const chunk = event as { choices?: { text?: unknown }[]; usage?: { completion_tokens?: unknown } | null } | null;
  const reported = chunk?.usage?.completion_tokens;
  if (typeof reported === "number" && reported >= 0) tally.reported = reported;
  for (const choice of Array.isArray(chunk?.choices) ? chunk.choices : []) if (typeof choice?.text === "string") tally.estimated += countTokens(choice.text);
}

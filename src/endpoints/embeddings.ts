// /v1/embeddings: offpeak-embed answers (inference/builtin/embed.ts); usage has prompt_tokens
// only; never streamed.
import { embeddingsResponse } from "../inference/builtin/embed";
import { readChatUsage, type EndpointKind } from "./kind";

export const embeddings: EndpointKind = {
  endpoint: "/v1/embeddings",
  path: "/embeddings",
  builtin: "embed",
  noun: "embeddings",
  answer: (body) => embeddingsResponse(body),
  readUsage: readChatUsage,
};

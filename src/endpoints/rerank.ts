// /v1/rerank (vLLM's, Jina/Cohere-shaped): upstream models only (./upstreamOnly.ts); `query` and `documents`.
import { upstreamOnlyKind } from "./upstreamOnly";

export const rerank = upstreamOnlyKind("/v1/rerank", "/rerank", "reranking", ["query", "documents"]);

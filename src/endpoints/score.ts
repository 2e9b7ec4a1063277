// /v1/score (vLLM's): upstream models only (./upstreamOnly.ts); the texts to compare are `text_1`/`text_2`
// (older vLLM), `data_1`/`data_2` or `queries`/`documents`, as the engine takes them.
import { upstreamOnlyKind } from "./upstreamOnly";

export const score = upstreamOnlyKind("/v1/score", "/score", "scores", ["text_1", "text_2", "data_1", "data_2", "queries", "documents"]);

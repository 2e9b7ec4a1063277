// /v1/moderations (OpenAI's): upstream models only (./upstreamOnly.ts); `input` is a string, strings, or multimodal parts.
import { upstreamOnlyKind } from "./upstreamOnly";

export const moderations = upstreamOnlyKind("/v1/moderations", "/moderations", "moderations", ["input"]);

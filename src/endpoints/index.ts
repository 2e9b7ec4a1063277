// The endpoint kinds offpeak serves, and the lookups everything else uses
// (see kind.ts). Order matters only for messages and for the upload
// scanner, which tries the urls in this order (chat first: most lines).
import { chatCompletions } from "./chatCompletions";
import { completions } from "./completions";
import { embeddings } from "./embeddings";
import type { EndpointKind } from "./kind";
import { moderations } from "./moderations";
import { rerank } from "./rerank";
import { responses } from "./responses";
import { score } from "./score";

export const ENDPOINT_KINDS: readonly EndpointKind[] = [chatCompletions, embeddings, responses, completions, moderations, score, rerank];

/** Every url a batch line may name (and every batch `endpoint`), mapped to its kind: "/v1/…" and "/api/v1/…". */
export const BATCH_URLS: ReadonlyMap<string, EndpointKind> = new Map(ENDPOINT_KINDS.flatMap((k) => [[k.endpoint, k] as const, ["/api" + k.endpoint, k] as const]));

/** The kind a batch line url or batch endpoint names, or undefined. */
export const kindOfUrl = (url: string): EndpointKind | undefined => BATCH_URLS.get(url);

/** The kind of a canonical batch endpoint as stored on a batch ("/v1/…"). Throws for one no module serves. */
export function endpointKind(endpoint: string): EndpointKind {
  const kind = BATCH_URLS.get(endpoint);
  if (!kind) throw new Error(`no endpoint module serves ${endpoint}`);
  return kind;
}

/** "/v1/chat/completions, /v1/embeddings, …" for messages. */
export const ENDPOINT_LIST = ENDPOINT_KINDS.map((k) => k.endpoint).join(", ");

export type { EndpointKind } from "./kind";

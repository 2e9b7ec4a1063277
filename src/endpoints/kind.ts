// One module per endpoint kind: what `/v1/chat/completions`,
// `/v1/embeddings`, `/v1/responses` and `/v1/completions` each mean, said
// once. The upload validator, the batch
// runner and its Workers, the interactive routes, scopes and rate-limit
// headers look a kind up (./index.ts) instead of branching on the URL:
// adding an endpoint is one more module here plus its interactive route.
//
// A kind module is plain data and functions with no server state: the batch
// Workers import it, so it must not pull in Elysia, the database or metrics.
import type { IdStream } from "../ids";
import type { ModelKind } from "../inference/registry";

/** The path under the API base, which is also the path under an upstream's base_url ("/messages…": Anthropic's, src/anthropic). */
export type EndpointPath = "/chat/completions" | "/embeddings" | "/responses" | "/completions" | "/messages" | "/messages/count_tokens" | "/moderations" | "/score" | "/rerank";

/** The token counts of one answer's `usage`, filled in place (reading them allocates nothing on the batch hot path). */
export interface TokenCounts {
  input: number;
  output: number;
  cached: number;
  reasoning: number;
}

/** What a streamed upstream answer has said about its output tokens so far (for tpm). */
export interface StreamTally {
  /** The count the stream reported itself (a usage event), or null. */
  reported: number | null;
  /** Tokens counted from its text deltas the way the built-in models count them. */
  estimated: number;
}

/**
 * A built-in answer given as its JSON text (one line, no newline), for a kind
 * that writes its answers by hand (responses): the batch line takes the text
 * as it is instead of serialising an object.
 */
export class SerializedAnswer {
  constructor(
    readonly json: string,
    readonly usage: unknown,
  ) {}
}

export interface EndpointKind {
  /** The batch `endpoint` and line `url`, e.g. "/v1/responses" ("/api/v1/…" is accepted too). */
  readonly endpoint: string;
  /** Where the interactive route lives under the API base, and where upstream calls go. */
  readonly path: EndpointPath;
  /** The built-in model that answers it (besides every upstream model); null: upstream models only (./upstreamOnly.ts). */
  readonly builtin: Exclude<ModelKind, "upstream"> | null;
  /** For messages: "… does not serve {noun}". */
  readonly noun: string;
  /**
   * The built-in model's answer to one request body (a batch line's body),
   * with its `usage`. Checks the body first: a bad one throws an ApiError
   * naming the field (a batch records it as that line's 400).
   */
  answer(body: Record<string, unknown>, ids: IdStream, created: number): { usage: unknown } | SerializedAnswer;
  /** Reads an answer's `usage` (anything, even missing) into `into`; absent counts are 0. */
  readUsage(usage: unknown, into: TokenCounts): void;
  /** Reads one parsed event of a streamed upstream answer into `tally` (absent: the kind does not stream). */
  readStreamEvent?(event: unknown, tally: StreamTally): void;
}

/** Whether a model of kind `model` may answer requests of `kind`: every upstream model does, and the kind's own built-in. */
export const serves = (kind: EndpointKind, model: ModelKind): boolean => model === "upstream" || model === kind.builtin;

export const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

interface ChatUsage {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
  completion_tokens_details?: { reasoning_tokens?: unknown } | null;
}

/** `usage` in the Chat Completions shape (also Completions and Embeddings): prompt_tokens, completion_tokens and their details. */
export function readChatUsage(raw: unknown, into: TokenCounts): void {
  if (raw === null || typeof raw !== "object") {
    into.input = into.output = into.cached = into.reasoning = 0;
    return;
  }
  const u = raw as ChatUsage;
  into.input = num(u.prompt_tokens);
  into.output = num(u.completion_tokens);
  into.cached = num(u.prompt_tokens_details?.cached_tokens);
  into.reasoning = num(u.completion_tokens_details?.reasoning_tokens);
}

/** Operations a batch line may call, mapped to the canonical endpoint of SPEC §5. */
export const BATCH_URLS: Record<string, string> = {
  "/v1/chat/completions": "/v1/chat/completions",
  "/api/v1/chat/completions": "/v1/chat/completions",
  "/v1/embeddings": "/v1/embeddings",
  "/api/v1/embeddings": "/v1/embeddings",
};

export const canonicalEndpoint = (url: string): string | undefined => BATCH_URLS[url];

import { ApiError } from "./errors";

/**
 * Metadata (docs/CONTRACT.md §5): an object of at most 16 string pairs, keys ≤ 64 and values ≤ 512
 * characters. Routes declare metadata as unknown and check it here, because a
 * TypeBox Record would silently coerce an array into an object.
 */
export function checkMetadata(m: unknown): Record<string, string> | null {
  if (m === undefined || m === null) return null;
  if (typeof m !== "object" || Array.isArray(m)) throw new ApiError("invalid_value", "metadata must be an object of strings", { param: "metadata" });
  const entries = Object.entries(m);
  if (entries.length > 16) throw new ApiError("invalid_value", "metadata may have at most 16 pairs", { param: "metadata" });
  for (const [k, v] of entries) {
    if (charCount(k) > 64) throw new ApiError("invalid_value", "metadata keys may have at most 64 characters", { param: "metadata" });
    if (typeof v !== "string") throw new ApiError("invalid_value", `metadata.${k.slice(0, 64)} must be a string`, { param: "metadata" });
    if (charCount(v) > 512) throw new ApiError("invalid_value", "metadata values may have at most 512 characters", { param: "metadata" });
  }
  return m as Record<string, string>;
}

/** Characters as people count them (code points): an emoji is one, not the two UTF-16 units of `.length`. */
function charCount(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

export const SCOPES = ["files:read", "files:write", "batches:read", "batches:write", "inference", "admin"] as const;
export type Scope = (typeof SCOPES)[number];

/** What a key gets when its creator names no scopes: everything but admin. */
export const DEFAULT_SCOPES: Scope[] = SCOPES.filter((s) => s !== "admin");

export const isScope = (s: string): s is Scope => (SCOPES as readonly string[]).includes(s);

export function hasScope(granted: readonly string[], needed: Scope): boolean {
  return granted.includes("admin") || granted.includes(needed);
}

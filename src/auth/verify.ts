import type { Db } from "../db/client";
import type { Scope } from "./scopes";
import { hashSecret, sameHash } from "./secrets";

export interface Principal {
  keyId: string;
  project: string;
  scopes: readonly string[];
  rpm: number | null;
  tpm: number | null;
}

interface KeyLookupRow {
  id: string;
  project: string;
  scopes: string;
  hash: string;
  rpm: number | null;
  tpm: number | null;
}

/** Bumped by in-process key changes (revocation); see keysChanged. */
const generations = new WeakMap<object, number>();

/** Call after changing api_keys through `db` in this process: verifiers drop their caches. */
export function keysChanged(db: Db): void {
  generations.set(db.$client, (generations.get(db.$client) ?? 0) + 1);
}

const MAX_CACHED = 10_000;

/**
 * Resolves a bearer secret to its key, or null. The lookup is by SHA-256 of
 * the secret, so timing reveals nothing about the secret; the final
 * comparison is constant-time anyway. A revoked key is not found.
 *
 * Known keys are cached by hash (never the secret itself), so the hot path is
 * one hash and one Map lookup instead of a query. Revocation still takes
 * effect on the next request: a change through this process bumps the
 * generation (keysChanged), and a change by another process — the
 * `offpeak keys revoke` CLI on the same data dir — changes SQLite's
 * `PRAGMA data_version`, which is checked on every request (a cheap read of
 * a counter, no table access). Unknown secrets are not cached.
 */
export function createVerifier(db: Db, adminKey: string | null) {
  const adminHash = adminKey ? hashSecret(adminKey) : null;
  const lookup = db.$client.query<KeyLookupRow, [string]>(
    "SELECT id, project, scopes, hash, rpm, tpm FROM api_keys WHERE hash = ? AND revoked_at IS NULL",
  );
  const dataVersion = db.$client.query<{ data_version: number }, []>("PRAGMA data_version");
  const cache = new Map<string, Principal>();
  let cachedAt = { version: -1, generation: -1 };
  const adminScopes: Scope[] = ["admin"];
  return (secret: string): Principal | null => {
    if (secret.length === 0 || secret.length > 512) return null;
    const hash = hashSecret(secret);
    // Plain comparison of digests is safe: timing can only reveal digest bits, never the secret's.
    if (hash === adminHash) return { keyId: "key_env_admin", project: "default", scopes: adminScopes, rpm: null, tpm: null };
    const version = dataVersion.get()!.data_version;
    const generation = generations.get(db.$client) ?? 0;
    if (version !== cachedAt.version || generation !== cachedAt.generation || cache.size >= MAX_CACHED) {
      cache.clear();
      cachedAt = { version, generation };
    }
    const hit = cache.get(hash);
    if (hit) return hit;
    const row = lookup.get(hash);
    if (!row || !sameHash(hash, row.hash)) return null;
    const principal: Principal = { keyId: row.id, project: row.project, scopes: JSON.parse(row.scopes), rpm: row.rpm, tpm: row.tpm };
    cache.set(hash, principal);
    return principal;
  };
}

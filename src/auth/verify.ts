import { and, eq, isNull } from "drizzle-orm";
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

/** The id OFFPEAK_ADMIN_KEY goes by: in GET /me, GET /keys (source "env") and the request log. */
export const ENV_ADMIN_KEY_ID = "key_env_admin";

/** Bumped by in-process key changes (revocation); see keysChanged. */
const generations = new WeakMap<object, number>();

/** Told of every keysChanged, by database. */
const watchers = new WeakMap<object, Set<() => void>>();

/** Call after changing api_keys through `db` in this process: verifiers drop their caches (and watchers hear of it). */
export function keysChanged(db: Db): void {
  generations.set(db, (generations.get(db) ?? 0) + 1);
  for (const watch of watchers.get(db) ?? []) watch();
}

/** `watch` is called at every keysChanged(db) (a revocation here or, through revocations.ts, elsewhere). Returns the unwatch. */
export function watchKeys(db: Db, watch: () => void): () => void {
  let set = watchers.get(db);
  if (!set) watchers.set(db, (set = new Set()));
  set.add(watch);
  return () => set.delete(watch);
}

const MAX_CACHED = 10_000;

/** A verifier answers at once from its cache, or after one lookup. */
export type Verify = (secret: string) => Principal | null | Promise<Principal | null>;

/**
 * Resolves a bearer secret to its key, or null. The lookup is by SHA-256 of
 * the secret, so timing reveals nothing about the secret; the final
 * comparison is constant-time anyway. A revoked key is not found.
 *
 * Known keys are cached by hash (never the secret itself), so the hot path is
 * one hash and one Map lookup instead of a query. Revocation still takes
 * effect: a change through this process bumps the generation (keysChanged)
 * at once; a change by another process is seen through db.keysVersion() —
 * on SQLite `PRAGMA data_version` (the `offpeak keys revoke` CLI on the same
 * file: on the next request), on Postgres the revoker's notice (NOTIFY:
 * within milliseconds) or else a count of revoked keys that each node polls
 * (within 250 ms). Unknown secrets are not cached. Streams opened with a key
 * end when it is revoked (revocations.ts).
 */
export function createVerifier(db: Db, adminKey: string | null): Verify {
  const adminHash = adminKey ? hashSecret(adminKey) : null;
  const { apiKeys } = db.t;
  const cache = new Map<string, Principal>();
  let cachedAt = { version: -1, generation: -1 };
  const adminScopes: Scope[] = ["admin"];
  // One object for every request with the admin key (the request log keeps text per principal object).
  const admin: Principal = { keyId: ENV_ADMIN_KEY_ID, project: "default", scopes: adminScopes, rpm: null, tpm: null };

  const lookup = async (hash: string, version: number, generation: number): Promise<Principal | null> => {
    const [row] = await db
      .select({ id: apiKeys.id, project: apiKeys.project, scopes: apiKeys.scopes, hash: apiKeys.hash, rpm: apiKeys.rpm, tpm: apiKeys.tpm })
      .from(apiKeys)
      .where(and(eq(apiKeys.hash, hash), isNull(apiKeys.revokedAt)))
      .limit(1);
    if (!row || !sameHash(hash, row.hash)) return null;
    const principal: Principal = { keyId: row.id, project: row.project, scopes: row.scopes, rpm: row.rpm, tpm: row.tpm };
    // Cached only if no revocation was seen while the lookup ran.
    if (cachedAt.version === version && cachedAt.generation === generation) cache.set(hash, principal);
    return principal;
  };

  return (secret: string) => {
    if (secret.length === 0 || secret.length > 512) return null;
    const hash = hashSecret(secret);
    // Plain comparison of digests is safe: timing can only reveal digest bits, never the secret's.
    if (hash === adminHash) return admin;
    const version = db.keysVersion();
    const generation = generations.get(db) ?? 0;
    if (version !== cachedAt.version || generation !== cachedAt.generation || cache.size >= MAX_CACHED) {
      cache.clear();
      cachedAt = { version, generation };
    }
    return cache.get(hash) ?? lookup(hash, version, generation);
  };
}

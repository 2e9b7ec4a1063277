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

/**
 * Resolves a bearer secret to its key, or null. The lookup is by SHA-256 of
 * the secret, so timing reveals nothing about the secret; the final
 * comparison is constant-time anyway. A revoked key is not found.
 */
export function createVerifier(db: Db, adminKey: string | null) {
  const adminHash = adminKey ? hashSecret(adminKey) : null;
  const lookup = db.$client.query<KeyLookupRow, [string]>(
    "SELECT id, project, scopes, hash, rpm, tpm FROM api_keys WHERE hash = ? AND revoked_at IS NULL",
  );
  const adminScopes: Scope[] = ["admin"];
  return (secret: string): Principal | null => {
    if (secret.length === 0 || secret.length > 512) return null;
    const hash = hashSecret(secret);
    if (adminHash && sameHash(hash, adminHash)) return { keyId: "key_env_admin", project: "default", scopes: adminScopes, rpm: null, tpm: null };
    const row = lookup.get(hash);
    if (!row || !sameHash(hash, row.hash)) return null;
    return { keyId: row.id, project: row.project, scopes: JSON.parse(row.scopes), rpm: row.rpm, tpm: row.tpm };
  };
}

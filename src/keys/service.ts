// API keys: created with a secret shown once, stored only as a SHA-256 hash,
// revoked by setting revoked_at (checked on every request, so revocation
// takes effect on the next one; the key's open streams end too, here and on
// every other node: auth/revocations.ts). Used by the HTTP routes and by the CLI.
import { keyRevoked } from "../auth/revocations";
import { and, asc, eq, isNull } from "drizzle-orm";
import type { Db } from "../db/client";
import type { KeyRow } from "../db/schema";
import { ApiError, notFound } from "../errors";
import { isId, newId, nowSeconds } from "../ids";
import { DEFAULT_SCOPES, isScope, type Scope } from "../auth/scopes";
import { hashSecret, newSecret } from "../auth/secrets";
import { ENV_ADMIN_KEY_ID } from "../auth/verify";

export interface CreateKeyInput {
  name: string;
  /** null or absent: the default scopes. */
  scopes?: string[] | null;
  /** null or absent: "default". */
  project?: string | null;
  /** Checked here, not by the route schema, so an error names rate_limits.rpm / .tpm. */
  rate_limits?: unknown;
}

const PROJECT_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

/** A key as the API shows it (never its secret). */
export interface KeyView {
  id: string;
  object: "api_key";
  name: string;
  project: string;
  scopes: string[];
  rate_limits: { rpm: number | null; tpm: number | null };
  /** null for OFFPEAK_ADMIN_KEY, which no one created. */
  created_at: number | null;
  prefix: string;
  /** "db": made by POST /keys, `offpeak keys create` or the first start; "env": OFFPEAK_ADMIN_KEY. */
  source: "db" | "env";
}

export function keyView(row: KeyRow): KeyView {
  return {
    id: row.id,
    object: "api_key",
    name: row.name,
    project: row.project,
    scopes: row.scopes,
    rate_limits: { rpm: row.rpm ?? null, tpm: row.tpm ?? null },
    created_at: row.createdAt,
    prefix: row.prefix,
    source: "db",
  };
}

/**
 * OFFPEAK_ADMIN_KEY as GET /keys lists it (docs/CONTRACT.md §19): an admin key of
 * project default that lives in the server's environment, not the database,
 * so it has no creation time and is not revocable through the API. Its
 * prefix shows at most a quarter of it (a short chosen key stays unguessable).
 */
export function envAdminKeyView(secret: string): KeyView {
  return {
    id: ENV_ADMIN_KEY_ID,
    object: "api_key",
    name: "OFFPEAK_ADMIN_KEY",
    project: "default",
    scopes: ["admin"],
    rate_limits: { rpm: null, tpm: null },
    created_at: null,
    prefix: secret.slice(0, Math.min(10, Math.floor(secret.length / 4))),
    source: "env",
  };
}

export async function createKey(db: Db, input: CreateKeyInput) {
  const name = input.name.trim();
  if (!name || name.length > 256) throw new ApiError("invalid_value", "name must be 1..256 characters", { param: "name" });
  const scopes = [...new Set(input.scopes ?? DEFAULT_SCOPES)];
  if (scopes.length === 0) throw new ApiError("invalid_value", "scopes must not be empty", { param: "scopes" });
  const bad = scopes.find((s) => !isScope(s));
  if (bad !== undefined) throw new ApiError("invalid_value", `unknown scope '${bad}'`, { param: "scopes" });
  const project = input.project ?? "default";
  if (!PROJECT_PATTERN.test(project))
    throw new ApiError("invalid_value", "project must be 1..64 characters of A-Z a-z 0-9 . _ -", { param: "project" });
  const limits = rateLimitsOf(input.rate_limits);
  const secret = newSecret();
  const row: KeyRow = {
    id: newId("key_"),
    name,
    project,
    scopes: scopes as Scope[],
    hash: hashSecret(secret),
    prefix: secret.slice(0, 10),
    rpm: limits.rpm,
    tpm: limits.tpm,
    createdAt: nowSeconds(),
    revokedAt: null,
  };
  await db.insert(db.t.apiKeys).values(row);
  return { ...keyView(row), key: secret };
}

/** `{rpm, tpm}` from a request's rate_limits: an object (or null/absent) whose members are null/absent or positive integers. */
function rateLimitsOf(value: unknown): { rpm: number | null; tpm: number | null } {
  if (value === undefined || value === null) return { rpm: null, tpm: null };
  if (typeof value !== "object" || Array.isArray(value)) throw new ApiError("invalid_value", "rate_limits must be an object", { param: "rate_limits" });
  const out = { rpm: null as number | null, tpm: null as number | null };
  for (const k of ["rpm", "tpm"] as const) {
    const v = (value as Record<string, unknown>)[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) throw new ApiError("invalid_value", `rate_limits.${k} must be a positive integer`, { param: `rate_limits.${k}` });
    out[k] = v;
  }
  return out;
}

export async function listKeys(db: Db) {
  const { apiKeys } = db.t;
  return (await db.select().from(apiKeys).where(isNull(apiKeys.revokedAt)).orderBy(asc(apiKeys.createdAt), asc(apiKeys.id))).map(keyView);
}

export async function revokeKey(db: Db, id: string) {
  if (id === ENV_ADMIN_KEY_ID)
    throw new ApiError(
      "invalid_state",
      `${ENV_ADMIN_KEY_ID} is OFFPEAK_ADMIN_KEY, set in the server's environment: it cannot be revoked here. Unset (or change) OFFPEAK_ADMIN_KEY and restart the server to retire it`,
      { param: "id" },
    );
  if (!isId("key_", id)) throw notFound("key", id);
  const { apiKeys } = db.t;
  const revoked = await db
    .update(apiKeys)
    .set({ revokedAt: nowSeconds() })
    .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
    .returning({ id: apiKeys.id });
  if (revoked.length === 0) throw notFound("key", id);
  await keyRevoked(db, id);
  return { id, object: "api_key" as const, deleted: true as const };
}

export async function countKeys(db: Db): Promise<number> {
  const [row] = await db.select({ n: db.sql.count() }).from(db.t.apiKeys);
  return row!.n;
}

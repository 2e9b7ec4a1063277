// Who is signed in: the key (in sessionStorage: this tab only, gone when it
// closes, never in a URL) and what it may do (GET /me).
import { ApiError, api, setApiKey } from "./api";
import type { Me } from "./types";

const STORAGE = "offpeak.key";

export interface Session {
  key: string;
  me: Me;
}

export function storedKey(): string | null {
  try {
    return sessionStorage.getItem(STORAGE);
  } catch {
    return null;
  }
}

/** Checks `key` with GET /me; throws an ApiError with a message for a person. */
export async function signIn(key: string, onUnauthorized: () => void): Promise<Session> {
  setApiKey(key.trim());
  let me: Me;
  try {
    me = await api<Me>("/me");
  } catch (e) {
    setApiKey(null);
    if (e instanceof ApiError && e.status === 401) throw new ApiError("This key was not accepted: it is unknown, mistyped or revoked.", 401);
    throw e;
  }
  setApiKey(key.trim(), onUnauthorized);
  try {
    sessionStorage.setItem(STORAGE, key.trim());
  } catch {
    /* storage disabled: signed in for this page only */
  }
  return { key: key.trim(), me };
}

export function signOut() {
  setApiKey(null);
  try {
    sessionStorage.removeItem(STORAGE);
  } catch {
    /* ignore */
  }
}

/** docs/CONTRACT.md §2: admin grants everything. */
export const can = (me: Me, scope: string) => me.scopes.includes("admin") || me.scopes.includes(scope);

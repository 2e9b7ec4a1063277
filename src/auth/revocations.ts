// Revocation reaches open streams (docs/CONTRACT.md §16). A key is checked when a
// request arrives; an SSE stream (batch events, a chat session's reply, a
// streamed completion) can outlive that check by minutes, so every open
// stream registers here under its key, and revoking the key ends them:
// at once for a revocation made in this process, within ≈250 ms for one made
// by another node or by the keys CLI (db.watchRevocations, from the server).
//
// Per Db, not per module: tests run several servers (nodes) in one process,
// and a revocation on one must reach the others the way it would across
// machines, through the database.
import { gte } from "drizzle-orm";
import type { Db } from "../db/client";
import { nowSeconds } from "../ids";
import { keysChanged } from "./verify";

/**
 * Registers a stream's `end` (ends it with its client told why; idempotent)
 * under the stream's key, and returns the release to call when the stream
 * ends by itself or its client leaves.
 */
export type StreamHold = (end: () => void) => () => void;

/** How many revoked ids are remembered for late registrations (a key id is 28 bytes). */
const MAX_REMEMBERED = 10_000;
/**
 * A revocation time is the revoker's clock (another node, the CLI) in
 * seconds: "revoked since the last look" is read with this much slack.
 */
const CLOCK_SLACK_S = 60;
/** A look that failed (the database is away) is tried again after this long. */
const RETRY_MS = 1000;

class Revocations {
  private readonly open = new Map<string, Set<() => void>>();
  /**
   * Keys seen revoked. A request authenticated just before its key was
   * revoked can register its stream just after (it waited for a model's
   * slot, say): such a stream ends at once instead of running on.
   */
  private readonly revoked = new Set<string>();

  constructor(private readonly db: Db) {}

  hold(keyId: string, end: () => void): () => void {
    if (this.revoked.has(keyId)) {
      // Not inside the caller's setup (a stream's start): just after it.
      queueMicrotask(end);
      return () => {};
    }
    let ends = this.open.get(keyId);
    if (!ends) this.open.set(keyId, (ends = new Set()));
    ends.add(end);
    return () => {
      const now = this.open.get(keyId);
      if (!now?.delete(end) || now.size > 0) return;
      this.open.delete(keyId);
    };
  }

  /** `keyId` is revoked: verifiers forget cached keys, and its streams end now. */
  revoke(keyId: string): void {
    // Learned once (a look repeats the last minute's revocations): the caches are emptied then, not at every look.
    if (!this.revoked.has(keyId)) {
      keysChanged(this.db);
      if (this.revoked.size >= MAX_REMEMBERED) this.revoked.delete(this.revoked.values().next().value!);
      this.revoked.add(keyId);
    }
    const ends = this.open.get(keyId);
    if (!ends) return;
    this.open.delete(keyId);
    for (const end of ends) {
      try {
        end();
      } catch {
        // One stream failing to end must not keep the others open.
      }
    }
  }

  /** Open streams now, over all keys (for tests). */
  get streams(): number {
    let n = 0;
    for (const s of this.open.values()) n += s.size;
    return n;
  }
}

const perDb = new WeakMap<Db, Revocations>();

export function revocationsOf(db: Db): Revocations {
  let r = perDb.get(db);
  if (!r) perDb.set(db, (r = new Revocations(db)));
  return r;
}

/** The hold for streams of `keyId` (pass it to sseResponse, passThrough, BatchEvents). */
export const streamHold =
  (db: Db, keyId: string): StreamHold =>
  (end) =>
    revocationsOf(db).hold(keyId, end);

/** This process revoked `keyId` (committed): its streams here end now, and the other processes are told. */
export async function keyRevoked(db: Db, keyId: string): Promise<void> {
  revocationsOf(db).revoke(keyId);
  // Best effort: a notice that does not go out is made up for by every
  // watcher's poll (within 250 ms), and the revocation itself is committed.
  await db.announceRevocation(keyId).catch(() => {});
}

/**
 * For a server: revocations by other processes reach this one's streams.
 * A notice that names the key ends its streams at once; "something changed"
 * is answered with one small query for the keys revoked since the last
 * look (never a query per request or per stream). Returns the stop.
 */
export function watchRevocations(db: Db): () => void {
  const registry = revocationsOf(db);
  let since = nowSeconds() - CLOCK_SLACK_S;
  let looking = false;
  let again = false;
  let stopped = false;
  let retry: ReturnType<typeof setTimeout> | null = null;
  const look = async () => {
    if (looking) {
      again = true;
      return;
    }
    looking = true;
    try {
      do {
        again = false;
        const startedAt = nowSeconds();
        const { apiKeys } = db.t;
        const rows = await db.select({ id: apiKeys.id }).from(apiKeys).where(gte(apiKeys.revokedAt, since));
        for (const r of rows) registry.revoke(r.id);
        since = startedAt - CLOCK_SLACK_S;
      } while (again && !stopped);
    } catch {
      if (!stopped && !retry) {
        retry = setTimeout(() => {
          retry = null;
          void look();
        }, RETRY_MS);
        retry.unref?.();
      }
    } finally {
      looking = false;
    }
  };
  const unwatch = db.watchRevocations((keyId) => (keyId ? registry.revoke(keyId) : void look()));
  return () => {
    stopped = true;
    if (retry) clearTimeout(retry);
    unwatch();
  };
}

// Which replica of an upstream takes a request (docs/CONTRACT.md §21), for
// interactive requests and batch lines alike.
//
// Engines keep the KV cache of recent prompts: a request whose prompt starts
// like one the engine has just run skips most of its prefill. So a prompt
// prefix should keep going to the same replica. The prefix is approximated
// by a hash of the model and the prompt's first PREFIX_CHARS characters
// (a system prompt or a shared document is that long or longer; llm-d and
// SGLang key their routing on prompt blocks the same way). The replicas are
// ranked for that key by rendezvous hashing (highest random weight,
// weighted): the ranking depends only on the key and the replica set, so
// every node of a cluster sends a prefix to the same engine, and adding or
// removing a replica moves only the prefixes it gains or loses.
//
// Load bounds the affinity (consistent hashing with bounded loads): the
// request takes the first replica in its ranking whose load (its requests
// in flight from this process, or the engine's own count of running and
// waiting requests when that is fresh and larger: other nodes' too),
// this one included, stay within LOAD_FACTOR × its weighted share of all in
// flight. A hot prefix thus spills onto its second choice (the same on every
// node) instead of piling onto one engine. A replica at its own
// max_concurrency is passed over; if all are, the least loaded takes it.
//
// Imports only the shared cells: a batch Worker loads it.
import type { Fate } from "../upstream/fate";
import { inFlightOf, isOpen, kvCacheOf, leave, limitNow, loadOf, wantedFull, type EngineTimes, type ReplicaCells } from "./cells";

/**
 * A request left replica `r` of `replicas` with `fate` (src/inference/upstream/fate.ts).
 * Counts it in the cells (an only replica never opens its breaker: its
 * health is the upstream's; a 429 or 503 is an overload for its adaptive
 * controller) and says whether the upstream's health is to hear of it:
 * always, but for a failure as a whole that another replica would have
 * taken. `opened`: this failure opened the replica's breaker.
 */
export function leftReplica(replicas: readonly ReplicaView[], cells: ReplicaCells, r: number, fate: Fate, heldMs: number): { tellUpstream: boolean; opened: boolean } {
  const whole = fate.kind === "engine_failure";
  const overloaded = fate.kind === "rate_limited" || (whole && fate.status === 503);
  const opened = leave(cells, r, !whole, heldMs, fate.kind === "answer", replicas.length > 1, overloaded);
  return { tellUpstream: !whole || replicas.length <= 1 || noOtherReplica(replicas, cells, r), opened };
}

/** Whether a failure on one replica is the upstream's as a whole: no other replica would take the request. */
export function noOtherReplica(replicas: readonly ReplicaView[], cells: ReplicaCells, failed: number): boolean {
  for (const r of replicas) if (r.idx !== failed && !isOpen(cells, r.idx)) return false;
  return true;
}

/** A replica as a dispatcher sees it: plain data, sent to the batch Workers. */
export interface ReplicaView {
  /** Its index in the shared cells (./cells.ts). */
  idx: number;
  id: string;
  /** Without a trailing slash. */
  baseUrl: string;
  weight: number;
  /** Its own max_concurrency (0: none of its own; the model's limit still bounds the total). */
  limit: number;
  /** Rendezvous seed: a hash of the id. */
  seed: number;
  /** Through offpeak's own HTTP client (plain http) rather than fetch. */
  ownClient: boolean;
}

/** Characters of the prompt that make its prefix key. */
export const PREFIX_CHARS = 1024;
/** How far above its weighted share of the load a replica may go to keep a prefix. */
export const LOAD_FACTOR = 1.25;

/** FNV-1a over UTF-16 code units, 32 bits: the same on every node and thread. */
export function hashText(text: string, h = 0x811c9dc5, max = text.length): number {
  const n = Math.min(max, text.length);
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A replica's rendezvous seed. */
export const seedOf = (id: string): number => hashText(id);

/**
 * The prefix key of a request body of any endpoint kind: the model, then
 * the prompt's first PREFIX_CHARS characters in order (chat messages'
 * roles and text, a completion's prompt, a Responses' instructions and
 * input, an embedding's input). 0: no prompt text (any replica will do).
 */
export function prefixKey(model: string, body: Record<string, unknown>): number {
  // Hashed as it is walked (no copy of the text): FNV-1a over each piece, a
  // NUL between pieces, seeded with the model's hash.
  let h = hashText(model);
  let left = PREFIX_CHARS;
  const add = (s: unknown): boolean => {
    if (typeof s !== "string" || left <= 0) return left > 0;
    if (left < PREFIX_CHARS) h = Math.imul(h, 0x01000193) >>> 0; // the NUL between pieces
    const n = s.length > left ? left : s.length;
    h = hashText(s, h, n);
    left -= n;
    return left > 0;
  };
  const addContent = (c: unknown): boolean => {
    if (typeof c === "string") return add(c);
    if (Array.isArray(c)) {
      for (const p of c) if (p && typeof p === "object" && !addContent((p as { text?: unknown; content?: unknown }).text ?? (p as { content?: unknown }).content)) return false;
      return left > 0;
    }
    return left > 0;
  };
  if (Array.isArray(body.messages)) {
    for (const m of body.messages) {
      if (!m || typeof m !== "object") continue;
      const msg = m as { role?: unknown; content?: unknown };
      if (!add(msg.role) || !addContent(msg.content)) break;
    }
  } else {
    if (add(body.instructions)) if (addContent(body.prompt)) addContent(body.input);
  }
  if (left === PREFIX_CHARS) return 0;
  return h || 1;
}

/** Mixes a key and a seed into a uniform 32-bit value (murmur3's finalizer). */
function mix(a: number, b: number): number {
  let h = (a ^ Math.imul(b, 0x9e3779b1)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Weighted rendezvous score: the highest wins; a replica of weight w wins w times as many keys. */
const score = (key: number, r: ReplicaView): number => r.weight / -Math.log((mix(key, r.seed) + 0.5) / 4294967296);

/** The replica a prefix goes to while it has room: the first in its ranking among those whose breaker is closed. */
export function homeOf(replicas: readonly ReplicaView[], cells: ReplicaCells, key: number): ReplicaView | null {
  let best: ReplicaView | null = null;
  let bestScore = -Infinity;
  for (const r of replicas) {
    if (isOpen(cells, r.idx)) continue;
    const sc = score(key, r);
    if (sc > bestScore) [best, bestScore] = [r, sc];
  }
  return best ?? replicas[0] ?? null;
}

/**
 * The replica for a request with prefix `key`, among `replicas` (the ones
 * taking work: not draining), leaving out those whose breaker is open and,
 * when another will do, `avoid` (the replica the request's last attempt
 * failed on). Null only when there is no replica at all (all drained).
 * `times`: when each engine's own load was read (./cells.ts engineLoadOf):
 * a fresh reading larger than this process's count is the load.
 */
export function pickReplica(replicas: readonly ReplicaView[], cells: ReplicaCells, key: number, avoid = -1, times: EngineTimes | null = null): ReplicaView | null {
  if (replicas.length <= 1) return replicas[0] ?? null;
  // The usual case, every breaker closed and nothing to avoid: the replicas themselves, no copy.
  if (avoid < 0 && !anyOpen(replicas, cells)) return chosen(replicas, cells, key, times);
  let candidates = replicas.filter((r) => !isOpen(cells, r.idx));
  // Every breaker open: the upstream fails as a whole, as one engine would,
  // and its health takes over (it goes down once probes fail too;
  // src/inference/upstream/health.ts): meanwhile any replica is tried.
  if (candidates.length === 0) candidates = replicas.slice();
  if (avoid >= 0 && candidates.length > 1) candidates = candidates.filter((r) => r.idx !== avoid);
  return chosen(candidates, cells, key, times);
}

/** Whether any of `replicas` has its breaker open. */
function anyOpen(replicas: readonly ReplicaView[], cells: ReplicaCells): boolean {
  for (const r of replicas) if (isOpen(cells, r.idx)) return true;
  return false;
}

/**
 * Another replica for an interactive request whose call never reached the
 * replicas it `tried` (refused: src/inference/upstream/fate.ts neverSent),
 * ranked as pickReplica ranks them: among those whose breaker is closed
 * and not tried yet; null when none is left (the request fails as it
 * would have on one engine).
 */
export function pickUntried(replicas: readonly ReplicaView[], cells: ReplicaCells, key: number, tried: readonly number[], times: EngineTimes | null = null): ReplicaView | null {
  const candidates = replicas.filter((r) => !isOpen(cells, r.idx) && !tried.includes(r.idx));
  return candidates.length === 0 ? null : chosen(candidates, cells, key, times);
}

/** Among `candidates` (at least one): the first in the key's ranking with room under the bounded load, else the least loaded. */
function chosen(candidates: readonly ReplicaView[], cells: ReplicaCells, key: number, times: EngineTimes | null): ReplicaView {
  if (candidates.length === 1) return candidates[0]!;
  // One clock reading for every load read here (a reading's age is checked against it).
  const now = times ? Date.now() : 0;
  let total = 1;
  let weights = 0;
  for (const r of candidates) {
    total += loadOf(cells, times, r.idx, now);
    weights += r.weight;
  }
  if (key !== 0) {
    // The candidates in their ranking for this key, best first, until one may take it (no sort, no array: they are few).
    let last = Infinity;
    for (let tried = 0; tried < candidates.length; tried++) {
      let best: ReplicaView | null = null;
      let bestScore = -Infinity;
      for (const r of candidates) {
        const sc = score(key, r);
        if (sc < last && sc > bestScore) [best, bestScore] = [r, sc];
      }
      if (!best) break;
      last = bestScore;
      if (atLimit(cells, best)) continue;
      if (loadOf(cells, times, best.idx, now) + 1 <= Math.max(1, Math.ceil((LOAD_FACTOR * total * best.weight) / weights))) return best;
    }
  }
  return leastLoaded(candidates, cells, times, now);
}

/** Whether replica `r` has its limit in flight now (its own max_concurrency, or its controller's); if so, it is noted as wanted (the limit binds). */
function atLimit(cells: ReplicaCells, r: ReplicaView): boolean {
  const limit = limitNow(cells, r);
  if (limit === 0 || inFlightOf(cells, r.idx) < limit) return false;
  wantedFull(cells, r.idx);
  return true;
}

/** The replica with the fewest requests in flight per unit of weight (ties: the emptier KV cache, then the first listed). */
export function leastLoaded(replicas: readonly ReplicaView[], cells: ReplicaCells, times: EngineTimes | null = null, now = times ? Date.now() : 0): ReplicaView {
  let best = replicas[0]!;
  let bestLoad = Infinity;
  for (const r of replicas) {
    const full = atLimit(cells, r) ? 1e9 : 0;
    // The engine's KV cache use (0–1, when it says) breaks ties between equal counts: the emptier cache holds the new prompt without evicting another's prefix.
    const load = full + (loadOf(cells, times, r.idx, now) + 1 + (kvCacheOf(cells, times, r.idx, now) ?? 0)) / r.weight;
    if (load < bestLoad) {
      best = r;
      bestLoad = load;
    }
  }
  return best;
}

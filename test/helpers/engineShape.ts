// The shape of an engine replica (./engineBatch.ts, served by
// ./engineReplicas.ts): its batch, its cache, and what a request costs.
//
// Work. A request's work, in ms of running alone:
//
//   decodeMs + prefillMsPerKChar · (restChars + prefixChars · (hit ? 1 − hitSaving : 1)) / 1000
//
// Its prompt is the text of its messages (each message's string content, or
// its text parts, joined by "\n"; `prompt` for /completions). Its prefix is
// the content of its first message when that is a system message, otherwise
// the first `prefixChars` (default 1000) characters of its prompt; the rest
// of the prompt (`restChars`) is never cached. The prefix's cache key is the
// model and the prefix text. With the defaults (100 ms of decode, 200 ms per
// 1000 prompt characters, 90% saved on a hit) a request with a 4,000-character
// system prompt needs 900 ms of work on a miss and 180 ms on a hit: prefill
// dominates, as it does on a real engine for long shared prompts.
import { promptOf, textOf, type ChatBody } from "./engineAnswers";
import { speedAt, type EngineShape } from "./engineModel";

export interface ReplicaShape {
  /** Decode work of every request, ms of running alone (default 100). */
  decodeMs: number;
  /** Prefill work per 1000 prompt characters, ms of running alone (default 200). */
  prefillMsPerKChar: number;
  /** Share of the prefix's prefill a cache hit saves (default 0.9). */
  hitSaving: number;
  /** Requests running at once: the engine's batch (default 16). */
  maxRunning: number;
  /** Prefixes in each replica's cache (default 4). */
  cachePrefixes: number;
  /** A prompt without a system message: its first this many characters are its prefix (default 1000). */
  prefixChars: number;
  /** From this many requests held (running + waiting), a new one gets 503 at once (default Infinity). */
  maxQueued: number;
  /** A request with a lower priority value preempts a running one when the batch is full (default false). */
  preempt: boolean;
  /** Running requests where the speed stops rising gently (default maxRunning); see ./engineModel.ts. */
  knee?: number;
  /** Running requests past which throughput falls (default maxRunning: never, as running is capped there). */
  cliff?: number;
  /** Latency at the knee is (1 + slope) × alone (default 0.1). */
  slope?: number;
  /** How fast throughput falls past the cliff (default 1). */
  fall?: number;
}

/** A fixed latency of `ms` for every request, however many are in flight (see "Fixed latency" above). */
export const fixedLatencyShape = (ms: number): Partial<ReplicaShape> => ({ decodeMs: ms, prefillMsPerKChar: 0, maxRunning: Infinity, cachePrefixes: 0 });

/** No batch limit and no prefill: the model reduces to a fixed latency of decodeMs. */
export function isFixedLatency(s: ReplicaShape): boolean {
  return s.maxRunning === Infinity && s.prefillMsPerKChar === 0 && (s.knee ?? Infinity) === Infinity && (s.cliff ?? Infinity) === Infinity;
}

export const DEFAULT_REPLICA_SHAPE: ReplicaShape = {
  decodeMs: 100,
  prefillMsPerKChar: 200,
  hitSaving: 0.9,
  maxRunning: 16,
  cachePrefixes: 4,
  prefixChars: 1000,
  maxQueued: Infinity,
  preempt: false,
};

/** The shape with every default filled in. */
export function replicaShape(s: Partial<ReplicaShape> = {}): ReplicaShape {
  return { ...DEFAULT_REPLICA_SHAPE, ...s };
}

/** The ./engineModel.ts shape whose speedAt() the running requests share. */
export function speedShape(s: ReplicaShape): EngineShape {
  return { unloadedMs: 0, knee: s.knee ?? s.maxRunning, cliff: s.cliff ?? s.maxRunning, failAt: Infinity, slope: s.slope, fall: s.fall };
}

/** Answers per second of a replica that always has a full batch of requests of `workMs` each. */
export function replicaThroughput(s: ReplicaShape, workMs: number): number {
  return (s.maxRunning * speedAt(speedShape(s), s.maxRunning) * 1000) / workMs;
}

export interface PrefixOf {
  /** The cache key: model and prefix text. */
  key: string;
  prefixChars: number;
  /** Prompt characters after the prefix (never cached). */
  restChars: number;
}

/** A request's prefix: its system message (its instructions for /responses), or the first `prefixChars` characters of its prompt. */
export function prefixOf(body: ChatBody, shape: Pick<ReplicaShape, "prefixChars">): PrefixOf {
  const model = String(body.model ?? "");
  const prompt = promptOf(body);
  const first = Array.isArray(body.messages) ? body.messages[0] : undefined;
  const prefix =
    first?.role === "system" ? textOf(first.content) : body.input !== undefined && typeof body.instructions === "string" ? body.instructions : prompt.slice(0, shape.prefixChars);
  return { key: `${model}\u0000${prefix}`, prefixChars: prefix.length, restChars: Math.max(0, prompt.length - prefix.length) };
}

/** A request's work in ms of running alone, with its prefix cached (`hit`) or not. */
export function workOf(shape: ReplicaShape, p: Pick<PrefixOf, "prefixChars" | "restChars">, hit: boolean): number {
  return shape.decodeMs + (shape.prefillMsPerKChar * (p.restChars + p.prefixChars * (hit ? 1 - shape.hitSaving : 1))) / 1000;
}

// One engine replica's continuous batch (the model behind ./engineReplicas.ts,
// which serves it over HTTP; docs/CONTRACT.md §21): a batch of at most
// `maxRunning` requests, a waiting queue ordered by priority, a prefix cache,
// and the counters and /metrics text. No HTTP here. Deterministic: what a
// request costs is computed from its body and the cache, never measured.
//
// Running. At most `maxRunning` requests run at once; they share the engine
// as in ./engineModel.ts (processor sharing: with n running, each progresses
// at speedAt(n) of its speed alone; knee and cliff default to maxRunning, so
// throughput rises almost in proportion up to a full batch and stays flat).
// The others wait in a queue ordered by the body's `priority` (a number,
// default 0; lower first, first come first served within one priority: vLLM's
// `--scheduling-policy priority`). With `preempt`, as vLLM's priority policy
// does, a request that arrives to a full batch with a lower priority value
// than a running one preempts the running one with the highest value (the
// latest among equals): that one goes back to the waiting queue in its
// place and starts over (recomputed) when it runs again. From `maxQueued`
// requests held (running + waiting; default no bound), a new one is answered
// 503 at once (the HTTP side asks full()). What a request costs (its work,
// its prefix): ./engineShape.ts.
//
// Prefix cache. An LRU of `cachePrefixes` (default 4) prefixes. A request's
// prefix is looked up when it starts running (a hit refreshes the entry);
// on a miss the prefix enters the cache when the request's prefill is done
// (its work left falls to decodeMs) or, at the latest, when it is answered,
// evicting the least recently used prefix. Two requests with the same new
// prefix that start together both miss, as on a real engine.
//
// Metrics. metricsText() in vLLM's names, labelled {model_name="<first
// model>"}: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:gpu_cache_usage_perc and vllm:kv_cache_usage_perc (the same figure,
// 0–1: running / maxRunning), vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (in tokens, as vLLM counts them: a token is 4
// characters; queries count every prompt token of a request that started,
// hits the prefix tokens of those that hit).
//
// Fixed latency. With no batch limit and no prefill (fixedLatencyShape(ms):
// maxRunning Infinity, prefillMsPerKChar 0) every request runs at once at
// full speed, so the model reduces to a fixed latency: runFixed(ms) answers
// ms after the request arrived (0: at once), on a timer of its own, with no
// queue and no cache (hits, misses and busyMs stay 0; pause() does not hold
// it). This is the loopback upstream of the pass-through and batch
// benchmarks, whose figures must not carry the cost of modelling a batch.
import { speedAt } from "./engineModel";
import { speedShape, workOf, type PrefixOf, type ReplicaShape } from "./engineShape";

const tokens = (chars: number) => Math.ceil(chars / 4);

export interface ReplicaStats {
  index: number;
  /** Listening (not killed). */
  up: boolean;
  /** Requests received: every POST whose body was read, whichever its model (contents() counts the same ones). */
  received: number;
  /** Requests for a model it serves (every POST that reached the engine, answered or not). */
  seen: number;
  /** Requests answered 200 (their whole answer handed to the connection). */
  answered: number;
  /** Requests answered by the fault plan (an error status or a dropped connection). */
  failed: number;
  /** Requests preempted (taken out of the batch for one of a lower priority value; `preempt`). */
  preempted: number;
  /** Requests answered 503 (maxQueued). */
  rejected: number;
  /** GET /v1/models requests (health probes, discovery). */
  probes: number;
  /** Requests running and waiting now. */
  inFlight: number;
  running: number;
  waiting: number;
  /** The most held at once (running + waiting). */
  peakInFlight: number;
  /** Prefix cache, in requests: hits and misses among those that started running. */
  hits: number;
  misses: number;
  /** Requests received, by their `priority` ("0" when the body has none). */
  byPriority: Record<string, number>;
  /** Work of the requests that started running, ms of running alone. */
  workMs: number;
  /** Requests lost to kill(): running or waiting when it was killed. */
  dropped: number;
  /** Held (running + waiting) at each kill, in order. */
  kills: number[];
  /** Time with at least one request running, ms. */
  busyMs: number;
  /** Time with more than `cliff` requests running (throughput falling), ms. */
  pastCliffMs: number;
  /** Since the start or the last reset, ms. */
  elapsedMs: number;
}

/** The counters that reset() zeroes: the HTTP side counts received, seen, answered, failed, rejected, probes, byPriority and dropped/kills. */
export type Counters = Omit<ReplicaStats, "index" | "up" | "inFlight" | "running" | "waiting" | "elapsedMs"> & { since: number };

export interface Admission {
  /** Order of arrival at this replica since the start (1, 2, …). */
  seq: number;
  priority: number;
  hit: boolean;
  workMs: number;
  /** The prefix's cache key (model, NUL, prefix text). */
  key: string;
  /** performance.now() when it started running. */
  at: number;
}

interface Held {
  seq: number;
  priority: number;
  prefix: PrefixOf;
  /** Work left, ms of running alone (set when it starts). */
  left: number;
  /** Its prefix is in the cache (a hit, or its prefill is done). */
  cached: boolean;
  hit: boolean;
  work: number;
  done: (ok: boolean) => void;
}

export const MAX_ADMISSIONS = 10_000;

/** One replica's batch of shape `shape`; `label` is the /metrics label set ({model_name="…"}). */
export function engineBatch(shape: ReplicaShape, label: string) {
  const speed = speedShape(shape);
  const running: Held[] = [];
  /** Ordered by (priority, seq). */
  const waiting: Held[] = [];
  /** Insertion order is recency: the first key is the least recently used. */
  const cache = new Map<string, true>();
  let admitted: Admission[] = [];
  let seq = 0;
  let paused = false;
  /** Fixed latency: requests on their timers now, and which life of the server they belong to (dropAll() starts a new one). */
  let fixedHeld = 0;
  let generation = 0;
  let last = performance.now();
  let timer: ReturnType<typeof setTimeout> | null = null;
  const fresh = (): Counters => ({
    received: 0,
    seen: 0,
    answered: 0,
    failed: 0,
    preempted: 0,
    rejected: 0,
    probes: 0,
    peakInFlight: held(),
    hits: 0,
    misses: 0,
    byPriority: {},
    workMs: 0,
    dropped: 0,
    kills: [],
    busyMs: 0,
    pastCliffMs: 0,
    since: performance.now(),
  });
  const held = () => running.length + waiting.length + fixedHeld;
  const s = fresh();
  // vLLM's counters only grow: /metrics never sees reset().
  let queryTokens = 0;
  let hitTokens = 0;

  function touch(key: string): void {
    cache.delete(key);
    cache.set(key, true);
    while (cache.size > shape.cachePrefixes) cache.delete(cache.keys().next().value!);
  }

  function advance(now: number): void {
    const dt = now - last;
    last = now;
    const n = running.length;
    if (dt <= 0 || n === 0 || paused) return;
    const step = dt * speedAt(speed, n);
    s.busyMs += dt;
    if (n > speed.cliff) s.pastCliffMs += dt;
    for (const r of running) {
      r.left -= step;
      if (!r.cached && r.left <= shape.decodeMs) {
        r.cached = true;
        touch(r.prefix.key);
      }
    }
  }

  function admit(): void {
    while (running.length < shape.maxRunning && waiting.length > 0) {
      const r = waiting.shift()!;
      const hit = cache.has(r.prefix.key);
      if (hit) touch(r.prefix.key);
      r.hit = r.cached = hit;
      r.work = r.left = workOf(shape, r.prefix, hit);
      queryTokens += tokens(r.prefix.prefixChars + r.prefix.restChars);
      if (hit) {
        s.hits++;
        hitTokens += tokens(r.prefix.prefixChars);
      } else s.misses++;
      s.workMs += r.work;
      running.push(r);
      admitted.push({ seq: r.seq, priority: r.priority, hit, workMs: r.work, key: r.prefix.key, at: performance.now() });
      if (admitted.length > 2 * MAX_ADMISSIONS) admitted = admitted.slice(-MAX_ADMISSIONS);
    }
  }

  function schedule(): void {
    if (timer) clearTimeout(timer);
    timer = null;
    if (running.length === 0 || paused) return;
    let least = Infinity;
    for (const r of running) least = Math.min(least, r.left);
    timer = setTimeout(finishDue, Math.max(0, least / speedAt(speed, running.length)));
  }

  function finishDue(): void {
    timer = null;
    advance(performance.now());
    // Timers fire on whole milliseconds: what is within a few microseconds of done is done.
    for (let i = 0; i < running.length; )
      if (running[i]!.left <= 0.005) {
        const [r] = running.splice(i, 1);
        if (!r!.cached) touch(r!.prefix.key);
        r!.done(true);
      } else i++;
    admit();
    schedule();
  }

  /** Puts a request in the waiting queue, ordered by (priority, arrival). */
  function wait(r: Held): void {
    let lo = 0;
    let hi = waiting.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const w = waiting[mid]!;
      if (w.priority < r.priority || (w.priority === r.priority && w.seq < r.seq)) lo = mid + 1;
      else hi = mid;
    }
    waiting.splice(lo, 0, r);
  }

  return {
    counters: s,
    /** Requests running and waiting now. */
    held,
    /** From maxQueued held, a new request is turned away. */
    full: () => running.length + waiting.length >= shape.maxQueued,

    /** Queues a request; `done` resolves true when its work is done, false if it was dropped (dropAll). `held` says whether it hit and its work once it runs. */
    enqueue(priority: number, prefix: PrefixOf): { held: { hit: boolean; work: number }; done: Promise<boolean> } {
      advance(performance.now());
      let r!: Held;
      const done = new Promise<boolean>((done) => {
        r = { seq: ++seq, priority, prefix, left: 0, cached: false, hit: false, work: 0, done };
        wait(r);
        s.peakInFlight = Math.max(s.peakInFlight, running.length + waiting.length);
        if (shape.preempt && running.length >= shape.maxRunning) {
          let victim = -1;
          for (let i = 0; i < running.length; i++) {
            const x = running[i]!;
            if (x.priority > priority && (victim < 0 || x.priority > running[victim]!.priority || (x.priority === running[victim]!.priority && x.seq > running[victim]!.seq))) victim = i;
          }
          if (victim >= 0) {
            const [v] = running.splice(victim, 1);
            s.preempted++;
            wait(v!);
          }
        }
        admit();
        schedule();
      });
      return { held: r, done };
    },

    /** Fixed latency: resolves true `ms` from now, false if dropAll() came first. */
    runFixed(ms: number): Promise<boolean> {
      const life = generation;
      fixedHeld++;
      s.peakInFlight = Math.max(s.peakInFlight, fixedHeld);
      s.workMs += ms;
      const finish = (): boolean => {
        if (life !== generation) return false;
        fixedHeld--;
        return true;
      };
      return ms > 0 ? Bun.sleep(ms).then(finish) : Promise.resolve(finish());
    },

    /** Every request held ends unanswered (done false); returns how many there were. */
    dropAll(): number {
      advance(performance.now());
      const all = [...running.splice(0), ...waiting.splice(0)];
      for (const r of all) r.done(false);
      if (timer) clearTimeout(timer);
      timer = null;
      // Requests on their fixed-latency timers belong to the old life: they end unanswered.
      const onTimers = fixedHeld;
      fixedHeld = 0;
      generation++;
      return all.length + onTimers;
    },

    stats(index: number, up: boolean): ReplicaStats {
      advance(performance.now());
      const { since, ...c } = s;
      return { ...c, index, up, byPriority: { ...s.byPriority }, kills: [...s.kills], inFlight: held(), running: running.length + fixedHeld, waiting: waiting.length, elapsedMs: performance.now() - since };
    },

    metricsText(): string {
      advance(performance.now());
      const usage = running.length / shape.maxRunning;
      const g = (name: string, help: string, type: "gauge" | "counter", v: number) => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${label} ${v}\n`;
      return (
        g("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", running.length + fixedHeld) +
        g("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", waiting.length) +
        g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
        g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", usage) +
        g("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "counter", queryTokens) +
        g("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "counter", hitTokens)
      );
    },

    admissions: () => admitted.slice(-MAX_ADMISSIONS),
    cacheKeys: () => [...cache.keys()],
    clearCache: () => cache.clear(),

    /** Zeroes the counters (in place); empties the cache too unless keepCache. */
    reset(keepCache: boolean): void {
      advance(performance.now());
      Object.assign(s, fresh());
      admitted = [];
      if (!keepCache) cache.clear();
    },
    /** Freezes the engine: nothing progresses (requests still arrive, start and queue). */
    pause(frozen: boolean): void {
      advance(performance.now());
      paused = frozen;
      schedule();
    },
    /** After a restart: no progress is owed for the time it was down. */
    restartClock(): void {
      last = performance.now();
    },
  };
}

export type EngineBatch = ReturnType<typeof engineBatch>;

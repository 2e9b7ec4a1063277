// A timeout for one upstream call that is cleared when the call ends, and
// the link that aborts the call when the client goes away.
//
// AbortSignal.timeout() keeps its timer (and so its signal) alive until it
// fires. With the default 600 s upstream timeout and thousands of requests a
// second, that is millions of pending timers: memory grows, and the timer heap
// and the GC add milliseconds to the tail of every request. A Deadline is an
// AbortController with an expiry time, dropped as soon as the answer has
// been read. For streams, restart() turns it into an idle timeout: a stream
// may run for as long as it keeps sending.
//
// The client's signal is linked late: only a call still running after
// LINK_AFTER_MS reads it (Bun makes a request's AbortSignal when it is first
// read) and listens to it. Reading it on every request made each garbage
// collection longer — mean Eden pause 1.4–1.8 ms with it, 1.1–1.3 ms without,
// in alternating wrk runs at 32 connections — and a call that short gains
// nothing from an abort anyway: its upstream answer is all but sent.
const LINK_AFTER_MS = 25;

// One interval per thread serves every Deadline, instead of a setTimeout
// and a clearTimeout per call (and per chunk of a stream, which restarts
// it): ≈4 µs of CPU a request in a bare Bun proxy, ≈2% of the main
// thread's samples in offpeak's chat pass-through. The interval runs only
// while deadlines are live; a deadline fires up to SWEEP_MS after its time.
// The live deadlines are a linked list through the deadlines themselves: a
// Set of them (an add and a delete per request) raised offpeak's peak RSS
// from 113 to 171 MB and its p99 from 6.5 to 8.4 ms under wrk -c32
// (bench/ab/proxy-ab.ts, 10 rounds); the list does neither.
const SWEEP_MS = LINK_AFTER_MS;
/** Live deadlines: an intrusive doubly linked list (prev/next on each), O(1) in and out, no hash table. */
let head: Deadline | null = null;
let count = 0;
let sweeper: ReturnType<typeof setInterval> | null = null;

function watch(d: Deadline): void {
  if (d.listed) return;
  d.listed = true;
  d.prev = null;
  d.next = head;
  if (head) head.prev = d;
  head = d;
  count++;
  if (sweeper) return;
  sweeper = setInterval(() => {
    const now = performance.now();
    for (let d = head; d; ) {
      const next = d.next;
      d.check(now);
      d = next;
    }
    if (count === 0) {
      clearInterval(sweeper!);
      sweeper = null;
    }
  }, SWEEP_MS);
  // An unanswered call keeps the process alive by itself (its socket); the sweep must not.
  sweeper.unref?.();
}

function unwatch(d: Deadline): void {
  if (!d.listed) return;
  d.listed = false;
  if (d.prev) d.prev.next = d.next;
  else head = d.next;
  if (d.next) d.next.prev = d.prev;
  d.prev = d.next = null;
  count--;
}

/** Told once when a call is aborted (timeout or client gone): offpeak's own HTTP client listens this way, without an AbortSignal. */
export interface AbortListener {
  onAbort(reason: unknown): void;
}

/** An abort a call can listen to (a Deadline). */
export interface CallAbort {
  readonly aborted: boolean;
  readonly reason: unknown;
  /** One listener at a time; null stops listening. */
  listen(listener: AbortListener | null): void;
}

export class Deadline implements CallAbort {
  /** In the live list (see watch). */
  listed = false;
  prev: Deadline | null = null;
  next: Deadline | null = null;
  /**
   * Made only when someone asks for `signal` (fetch does; offpeak's own
   * client listens instead): an AbortController and its signal per call
   * cost ≈10 µs of server CPU a request in the chat pass-through (74–77 →
   * 64–66 µs, bench/ab/proxy-ab.ts, two alternating runs), though only 1.3% of
   * the main thread's JS samples: they are native wrappers, more for every
   * garbage collection to look at.
   */
  private controller: AbortController | null = null;
  private listener: AbortListener | null = null;
  aborted = false;
  reason: unknown = undefined;
  private readonly startedAt = performance.now();
  private expiresAt: number;
  private parent: AbortSignal | null = null;
  private onParentAbort: (() => void) | null = null;
  /** Until linked (or cleared): how to read the client's signal. Dropped then, so it holds nothing alive. */
  private clientSignal: (() => AbortSignal) | null;
  /** True once the deadline itself (not the client) aborted the call. */
  timedOut = false;

  /** `clientSignal`: the client's abort signal, read only if the call outlives LINK_AFTER_MS. */
  constructor(
    private readonly ms: number,
    clientSignal?: () => AbortSignal,
  ) {
    this.expiresAt = this.startedAt + ms;
    this.clientSignal = clientSignal ?? null;
    if (!this.clientSignal || ms <= LINK_AFTER_MS) this.link();
    if (!this.aborted) watch(this);
  }

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  listen(listener: AbortListener | null): void {
    this.listener = listener;
  }

  private abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    unwatch(this);
    this.controller?.abort(reason);
    const l = this.listener;
    this.listener = null;
    l?.onAbort(reason);
  }

  /** Starts the full timeout again (called on every chunk of a stream, which is a call that lasts: it is linked now). */
  restart(): void {
    this.link();
    if (this.aborted) return;
    this.expiresAt = performance.now() + this.ms;
    watch(this);
  }

  /** The call is over: drop the timeout and the link to the client's signal. */
  clear(): void {
    this.clientSignal = null;
    unwatch(this);
    if (this.onParentAbort) this.parent!.removeEventListener("abort", this.onParentAbort);
    this.onParentAbort = null;
  }

  /** Whether the client's signal says it has gone (reads it: for error paths only). */
  clientGone(): boolean {
    return this.parent?.aborted ?? this.clientSignal?.().aborted ?? false;
  }

  /** Called by the sweep: links a call that has lasted, expires one past its time. */
  check(now: number): void {
    if (this.clientSignal && now - this.startedAt >= LINK_AFTER_MS) this.link();
    if (this.aborted) unwatch(this);
    else if (now >= this.expiresAt) this.expire();
  }

  private expire(): void {
    this.timedOut = true;
    this.abort(new DOMException(`timed out after ${this.ms} ms`, "TimeoutError"));
  }

  /** Listens to the client's signal (aborting at once if the client has gone already); once, and not after clear(). */
  private link(): void {
    const read = this.clientSignal;
    if (!read) return;
    this.clientSignal = null;
    const parent = (this.parent = read());
    if (parent.aborted) return void this.abort(parent.reason);
    this.onParentAbort = () => this.abort(parent.reason);
    parent.addEventListener("abort", this.onParentAbort, { once: true });
  }
}

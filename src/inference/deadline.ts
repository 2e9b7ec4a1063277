// A timeout for one upstream call that is cleared when the call ends.
//
// AbortSignal.timeout() keeps its timer (and so its signal) alive until it
// fires. With the default 600 s upstream timeout and thousands of requests a
// second, that is millions of pending timers: memory grows, and the timer heap
// and the GC add milliseconds to the tail of every request. A Deadline is an
// AbortController with a plain setTimeout, cleared as soon as the answer has
// been read. For streams, restart() turns it into an idle timeout: a stream
// may run for as long as it keeps sending.
export class Deadline {
  private readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly onParentAbort: (() => void) | null = null;
  /** True once the deadline itself (not the parent signal) aborted the call. */
  timedOut = false;

  constructor(
    private readonly ms: number,
    private readonly parent?: AbortSignal,
  ) {
    if (parent) {
      if (parent.aborted) this.controller.abort(parent.reason);
      else {
        this.onParentAbort = () => this.controller.abort(parent.reason);
        parent.addEventListener("abort", this.onParentAbort, { once: true });
      }
    }
    this.restart();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Starts the full timeout again (called on every chunk of a stream). */
  restart(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.controller.signal.aborted) return;
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new DOMException(`timed out after ${this.ms} ms`, "TimeoutError"));
    }, this.ms);
  }

  /** The call is over: drop the timer and the link to the parent signal. */
  clear(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.onParentAbort) this.parent!.removeEventListener("abort", this.onParentAbort);
  }
}

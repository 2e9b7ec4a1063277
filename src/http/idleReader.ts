// A request body reader that gives up on a client that stops sending
// (docs/CONTRACT.md §16: an upload idle for upload_idle_timeout_s is ended with 408).
// Bun's own idleTimeout (255 s at most) let 60 uploads that stalled after
// their file part's headers hold a temp file, two validator Workers and
// ≈5 MB each for minutes, and a byte every few minutes kept them forever.
//
// Idle means: a read of ours has waited this long and no byte came. Time
// in which we do not read (the validator or the disk is behind, so the
// client cannot send) is not the client's idleness. One timer per body,
// re-armed once per period, not one per chunk.
import { ApiError } from "../errors";
import type { ChunkReader } from "../files/multipart";

export class IdleReader implements ChunkReader {
  private readonly reader: ChunkReader & { cancel(reason?: unknown): Promise<void>; releaseLock(): void };
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** When the pending read began (performance.now()), or -1 while none is pending. */
  private waitingSince = -1;
  private rejectPending: ((e: unknown) => void) | null = null;
  /** Set once the body went idle: every later read fails with it. */
  private failure: ApiError | null = null;
  private closed = false;

  constructor(
    body: ReadableStream<Uint8Array>,
    private readonly idleMs: number,
  ) {
    this.reader = body.getReader();
  }

  /** The next chunk, like ReadableStreamDefaultReader.read(); rejects with 408 when none comes within idleMs. */
  read(): ReturnType<ChunkReader["read"]> {
    if (this.failure) return Promise.reject(this.failure);
    this.waitingSince = performance.now();
    if (this.timer === null && !this.closed) this.arm(this.idleMs);
    return new Promise((resolve, reject) => {
      this.rejectPending = reject;
      this.reader.read().then(
        (r) => {
          this.waitingSince = -1;
          this.rejectPending = null;
          resolve(r);
        },
        (e) => {
          this.waitingSince = -1;
          this.rejectPending = null;
          reject(e);
        },
      );
    });
  }

  /** Whether the body went idle (its reads now fail with 408). */
  get timedOut(): boolean {
    return this.failure !== null;
  }

  /** Stops the timer and lets go of the body (cancelling it if asked: nothing more of it will be read). */
  close(cancel = false): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (cancel) this.reader.cancel().catch(() => {});
    else if (this.waitingSince < 0 && !this.failure) this.reader.releaseLock();
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.check(), ms);
    // A stalled client must not keep the process alive.
    this.timer.unref?.();
  }

  private check(): void {
    this.timer = null;
    if (this.closed) return;
    if (this.waitingSince < 0) return; // not reading: the next read re-arms
    const waited = performance.now() - this.waitingSince;
    if (waited < this.idleMs) return this.arm(this.idleMs - waited);
    this.failure = new ApiError("request_timeout", `No request body bytes arrived for ${Math.round(this.idleMs / 1000)} s: the upload was ended`, {
      headers: { connection: "close" },
    });
    const reject = this.rejectPending;
    this.rejectPending = null;
    reject?.(this.failure);
    // The pending read of the body settles (done) once it is cancelled; its answer is not wanted.
    this.reader.cancel(this.failure).catch(() => {});
  }
}

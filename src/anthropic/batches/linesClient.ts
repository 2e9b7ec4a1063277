// The main thread's side of a message batch's create (./lines.worker.ts):
// the body's chunks go to a Worker as they are read, and the lines of the
// batch input file come back, encoded, in order, to be written. Parsing, checking
// and translating 100,000 requests is the CPU of a create: on the HTTP
// thread it held every other request back for seconds, and its garbage
// grew that thread's heap.
//
// Backpressure both ways: at most MAX_CHUNKS chunks sent and not yet read
// by the Worker, and at most MAX_WRITES pieces of lines waiting to be
// written; the create reads its body no faster.
//
// A create's Worker is kept for the next create while creates follow each
// other (a fresh one's JIT starts cold: ≈40% more CPU a request), and
// ended once idle for IDLE_MS; it collects its garbage as it goes (on the
// batch Workers' budget) and after each create.
// A Worker kept for good held ≈50 MB of peak RSS through the batches'
// run and their results.
import { ApiError, type ErrorCode } from "../../errors";
import { LINES_WORKER } from "../../workers";

const MAX_CHUNKS = 8;
const MAX_WRITES = 4;

/** A Worker idle this long is ended. */
const IDLE_MS = 2_000;

/** The Worker kept from the last create, for the next one (a fresh Worker's JIT starts cold) while creates follow each other. */
let idle: Worker | null = null;
let idleTimer: ReturnType<typeof setTimeout> | null = null;

function takeWorker(): Worker {
  if (idleTimer) clearTimeout(idleTimer);
  idleTimer = null;
  const w = idle ?? new Worker(LINES_WORKER);
  idle = null;
  w.ref();
  return w;
}

function keep(w: Worker): void {
  w.unref(); // an idle Worker must not keep the process alive
  idle = w;
  idleTimer = setTimeout(() => {
    idle?.terminate();
    idle = null;
    idleTimer = null;
  }, IDLE_MS);
  idleTimer.unref();
}

/** One create's Worker: send() the body's chunks, then end(); lines go to `write` in order. */
export class RequestLinesJob {
  private readonly worker: Worker;
  private chunksOut = 0;
  private writesOut = 0;
  private writing: Promise<void> = Promise.resolve();
  private room: (() => void) | null = null;
  private failure: unknown = null;
  private readonly result: Promise<number>;
  /** The Worker answered done or refused. */
  private finished = false;
  private closed = false;

  constructor(models: string[], write: (bytes: Uint8Array) => Promise<void> | void) {
    this.worker = takeWorker();
    this.result = new Promise<number>((resolve, reject) => {
      this.worker.onmessage = (e: MessageEvent) => {
        const m = e.data as
          | { type: "taken" }
          | { type: "bytes"; buffer: ArrayBuffer; length: number }
          | { type: "done"; count: number }
          | { type: "refused"; error: { code: ErrorCode | null; message: string; param: string | null } };
        if (m.type === "taken") this.chunksOut--;
        else if (m.type === "bytes") {
          this.writesOut++;
          this.writing = this.writing.then(async () => {
            await write(new Uint8Array(m.buffer, 0, m.length));
            // Written (the writer copies or writes before it resolves): the buffer goes back to be filled again.
            if (!this.closed) this.worker.postMessage({ type: "buffer", buffer: m.buffer }, [m.buffer]);
            this.writesOut--;
            this.wake();
          });
          this.writing.catch((err) => this.fail(err));
        } else if (m.type === "done") {
          this.finished = true;
          // Every write is in (or one failed) before the count is the answer.
          this.writing.then(() => resolve(m.count), reject);
        } else {
          this.finished = true;
          const { code, message, param } = m.error;
          const err = code ? new ApiError(code, message, { param }) : new Error(message);
          this.fail(err);
          reject(err);
        }
        this.wake();
      };
      this.worker.onerror = (e) => {
        const err = new Error(`message batch lines: ${e.message}`);
        this.fail(err);
        reject(err);
      };
    });
    // Read by the caller at the end; a refusal before then is seen by send().
    this.result.catch(() => {});
    this.worker.postMessage({ type: "begin", models });
  }

  /**
   * Gives a chunk of the body to the Worker: its buffer moves there when the
   * chunk is all of it (the body's reader hands each chunk over for good),
   * else a copy goes. Waits while the Worker or the writes are behind.
   * Throws the refusal once there is one.
   */
  async send(chunk: Uint8Array): Promise<void> {
    this.check();
    const whole = chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength && chunk.buffer instanceof ArrayBuffer;
    const bytes = whole ? chunk : chunk.slice();
    this.worker.postMessage({ type: "chunk", bytes }, [bytes.buffer as ArrayBuffer]);
    this.chunksOut++;
    while ((this.chunksOut >= MAX_CHUNKS || this.writesOut >= MAX_WRITES) && this.failure === null && !this.finished) await new Promise<void>((r) => (this.room = r));
    this.check();
  }

  /** The body is all sent: the number of requests once every line is written, or the refusal thrown. */
  async end(): Promise<number> {
    this.check();
    this.worker.postMessage({ type: "end" });
    return this.result;
  }

  /** The create is over (answered or not): its Worker is kept for the next if it answered (done or refused), else ended. */
  close(): void {
    this.closed = true;
    this.worker.onmessage = null;
    this.worker.onerror = null;
    if (this.finished && idle === null) keep(this.worker);
    else this.worker.terminate();
  }

  private check(): void {
    if (this.failure !== null) throw this.failure;
  }

  private fail(err: unknown): void {
    this.failure ??= err;
    this.wake();
  }

  private wake(): void {
    this.room?.();
    this.room = null;
  }
}

// Main-thread handle on a validation Worker. Bytes are gathered into ~1 MB
// blocks before posting (fewer messages; one copy, then a transfer), and at
// most MAX_IN_FLIGHT bytes may wait in the worker, so a slow validator slows
// the upload instead of growing memory. The worker transfers each block back
// with its ack and the block is filled again: an upload of any size cycles
// through the same ~9 blocks instead of leaving hundreds for the GC.
import type { ValidationResult } from "./batchFileValidator";
import { VALIDATE_WORKER } from "../workers";

const BLOCK = 1 << 20;
const MAX_IN_FLIGHT = 8 << 20;
/**
 * Workers kept for the next upload after a clean finish. A fresh Worker is a
 * new JS VM whose JIT starts cold (≈0.5 CPU-s of compiling per 1M-line
 * upload, measured); a kept one validates at full speed from its first line.
 * A Worker is reused only after it has answered with its result, so no
 * message of an earlier upload can reach the next one.
 */
const KEEP_IDLE = 2;
const idle: Worker[] = [];

function takeWorker(): Worker {
  const w = idle.pop();
  if (w) {
    w.ref();
    return w;
  }
  return new Worker(VALIDATE_WORKER);
}

function giveBack(w: Worker): void {
  if (idle.length >= KEEP_IDLE) return void w.terminate();
  w.onmessage = null;
  w.onerror = null;
  w.unref(); // an idle validator must not keep the process alive
  idle.push(w);
}

export class ValidatorClient {
  private readonly worker: Worker;
  private block = new Uint8Array(BLOCK);
  private readonly free: Uint8Array<ArrayBuffer>[] = [];
  private used = 0;
  private inFlight = 0;
  private drained: (() => void) | null = null;
  private resultPromise: Promise<ValidationResult>;
  private closed = false;
  /** True as soon as the worker has seen a bad line. */
  failed = false;

  constructor(maxRequests: number) {
    this.worker = takeWorker();
    let resolveResult!: (r: ValidationResult) => void;
    let rejectResult!: (e: Error) => void;
    this.resultPromise = new Promise((res, rej) => {
      resolveResult = res;
      rejectResult = rej;
    });
    this.resultPromise.catch(() => {});
    this.worker.onmessage = (e: MessageEvent) => {
      const m = e.data;
      if (m.type === "ack") {
        this.inFlight -= m.block.byteLength;
        if (m.block.byteLength === BLOCK) this.free.push(m.block);
        if (this.drained && this.inFlight <= MAX_IN_FLIGHT / 2) {
          const d = this.drained;
          this.drained = null;
          d();
        }
      } else if (m.type === "failed") this.failed = true;
      else if (m.type === "result") resolveResult(m.result);
    };
    this.worker.onerror = (e) => {
      rejectResult(new Error(`validator worker failed: ${e.message}`));
      // An upload waiting for room in the Worker must not wait forever.
      this.failed = true;
      const d = this.drained;
      this.drained = null;
      d?.();
    };
    this.worker.postMessage({ type: "init", maxRequests });
  }

  /** Copies `chunk`; resolves when the worker has room for more. */
  async write(chunk: Uint8Array): Promise<void> {
    let off = 0;
    while (off < chunk.length) {
      const n = Math.min(BLOCK - this.used, chunk.length - off);
      this.block.set(chunk.subarray(off, off + n), this.used);
      this.used += n;
      off += n;
      if (this.used === BLOCK) this.flush();
    }
    if (this.inFlight > MAX_IN_FLIGHT) await new Promise<void>((r) => (this.drained = r));
  }

  private flush(): void {
    if (this.used === 0) return;
    const out = this.used === BLOCK ? this.block : this.block.slice(0, this.used);
    this.inFlight += out.byteLength;
    this.worker.postMessage(out, [out.buffer]);
    this.block = this.free.pop() ?? new Uint8Array(BLOCK);
    this.used = 0;
  }

  async finish(): Promise<ValidationResult> {
    this.flush();
    this.worker.postMessage({ type: "finish" });
    let result: ValidationResult;
    try {
      result = await this.resultPromise;
    } catch (e) {
      this.close();
      throw e;
    }
    // Every block was acknowledged before the result: the Worker is clean.
    if (!this.closed) {
      this.closed = true;
      giveBack(this.worker);
    }
    return result;
  }

  /** Abandons the upload: the Worker may still hold blocks of it, so it is not reused. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.worker.terminate();
    this.drained?.();
  }
}

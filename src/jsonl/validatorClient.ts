// Main-thread handle on an upload's validation Workers (a line scanner and a
// duplicate finder, see validate.worker.ts). Bytes are gathered into ~1 MB
// blocks before posting (fewer messages; one copy, then a transfer), and at
// most MAX_IN_FLIGHT bytes may wait in the scanner, so a slow validator slows
// the upload instead of growing memory. The scanner transfers each block back
// with its ack and the block is filled again: an upload of any size cycles
// through the same ~9 blocks instead of leaving hundreds for the GC.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { withDuplicates, type ValidationResult } from "./batchFileValidator";
import type { ConfirmedDuplicate } from "./confirm";
import { SPILL_PARTITIONS, type DuplicateReport, type FinderOptions, type Suspect } from "./duplicateFinder";
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
const KEEP_IDLE = 2; // one upload's pair
const idle: Worker[] = [];
/** Validator Workers held by uploads now (idle ones apart): at most two per upload, so bounded by the upload limit (src/files/uploadSlots.ts). */
let busy = 0;

/** Validator Workers alive: held by uploads, and kept idle for the next one. */
export const validatorWorkers = () => ({ busy, idle: idle.length });

function takeWorker(): Worker {
  busy++;
  const w = idle.pop();
  if (w) {
    w.ref();
    return w;
  }
  return new Worker(VALIDATE_WORKER);
}

function giveBack(w: Worker): void {
  busy--;
  if (idle.length >= KEEP_IDLE) return void w.terminate();
  w.onmessage = null;
  w.onerror = null;
  w.unref(); // an idle validator must not keep the process alive
  idle.push(w);
}

function end(w: Worker): void {
  busy--;
  w.terminate();
}

export interface ValidatorOptions {
  /** Bytes the duplicate check may keep in memory before it spills (see duplicateFinder.ts). */
  duplicateCheckBytes?: number;
  /** The data directory: spill files go to <dataDir>/tmp, which the store sweeps at start (a crash leaves none for long). Without it, never spill. */
  dataDir?: string;
}

export class ValidatorClient {
  /** Checks the lines; sends the custom_ids to `finder`. */
  private readonly scanner: Worker;
  /** Finds repeated custom_ids. */
  private readonly finder: Worker;
  private block = new Uint8Array(BLOCK);
  private readonly free: Uint8Array<ArrayBuffer>[] = [];
  private used = 0;
  private inFlight = 0;
  private drained: (() => void) | null = null;
  private resultPromise: Promise<ValidationResult>;
  private closed = false;
  /** True as soon as either Worker has seen a bad line (or too many suspect duplicates). */
  failed = false;
  /** Prefix of this upload's spill files, removed here if the finder is terminated before it removes them. */
  private readonly spillPath: string | null;

  constructor(maxRequests: number, opts: ValidatorOptions = {}) {
    this.spillPath = opts.dataDir ? join(opts.dataDir, "tmp", `dupcheck-${crypto.randomUUID()}`) : null;
    this.scanner = takeWorker();
    this.finder = takeWorker();
    const scanned = Promise.withResolvers<ValidationResult>();
    const checked = Promise.withResolvers<DuplicateReport>();
    this.resultPromise = Promise.all([scanned.promise, checked.promise]).then(([result, dupes]) => withDuplicates(result, dupes));
    this.resultPromise.catch(() => {});
    this.scanner.onmessage = (e: MessageEvent) => {
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
      else if (m.type === "result") scanned.resolve(m.result);
    };
    this.finder.onmessage = (e: MessageEvent) => {
      const m = e.data;
      if (m.type === "failed") this.failed = true;
      else if (m.type === "report") checked.resolve(m.report);
    };
    const onError = (e: ErrorEvent) => {
      const err = new Error(`validator worker failed: ${e.message}`);
      scanned.reject(err);
      checked.reject(err);
      // An upload waiting for room in the Worker must not wait forever.
      this.failed = true;
      const d = this.drained;
      this.drained = null;
      d?.();
    };
    this.scanner.onerror = onError;
    this.finder.onerror = onError;
    const ids = new MessageChannel();
    const options: FinderOptions = { memoryBytes: opts.duplicateCheckBytes, spillPath: this.spillPath };
    this.finder.postMessage({ type: "init-finder", port: ids.port2, options }, [ids.port2]);
    this.scanner.postMessage({ type: "init", maxRequests, port: ids.port1 }, [ids.port1]);
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
    this.scanner.postMessage(out, [out.buffer]);
    this.block = this.free.pop() ?? new Uint8Array(BLOCK);
    this.used = 0;
  }

  async finish(): Promise<ValidationResult> {
    this.flush();
    this.scanner.postMessage({ type: "finish" });
    let result: ValidationResult;
    try {
      result = await this.resultPromise;
    } catch (e) {
      this.close();
      throw e;
    }
    // Every block was acknowledged, and every id batch taken, before the
    // results: both Workers are clean.
    if (!this.closed) {
      this.closed = true;
      giveBack(this.scanner);
      giveBack(this.finder);
    }
    return result;
  }

  /** Abandons the upload: the Workers may still hold parts of it, so they are not reused. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    end(this.scanner);
    end(this.finder);
    this.drained?.();
    if (this.spillPath) {
      // A few unlinks, now and once the Worker is surely gone (an append
      // may have been under way); a crash leaves them to the sweep of
      // <dataDir>/tmp at start.
      const path = this.spillPath;
      const remove = () => {
        // Off the main thread: at 10M lines the partitions hold ≈120 MB.
        for (let p = 0; p < SPILL_PARTITIONS; p++) void rm(`${path}.${p}`, { force: true }).catch(() => {});
      };
      remove();
      setTimeout(remove, 1000).unref();
    }
  }
}

/**
 * Confirms duplicate suspects against the stored file (src/jsonl/confirm.ts)
 * in a Worker of its own: the main thread only moves the file's chunks (at
 * most MAX_IN_FLIGHT bytes waiting), and stops reading as soon as the
 * Worker has decided. Parsing up to 10M lines on the main thread would stall
 * every request for seconds. The Worker is not kept (this path is rare: a
 * real duplicate or a fingerprint collision).
 */
export async function confirmInWorker(stream: ReadableStream<Uint8Array>, suspects: readonly Suspect[]): Promise<ConfirmedDuplicate | null> {
  const w = new Worker(VALIDATE_WORKER);
  const decided = Promise.withResolvers<ConfirmedDuplicate | null>();
  decided.promise.catch(() => {});
  let inFlight = 0;
  let finished = false;
  let wake: (() => void) | null = null;
  const wakeUp = () => {
    const f = wake;
    wake = null;
    f?.();
  };
  w.onmessage = (e: MessageEvent) => {
    const m = e.data;
    if (m.type === "confirm-ack") {
      inFlight -= m.bytes;
      if (inFlight <= MAX_IN_FLIGHT / 2) wakeUp();
    } else if (m.type === "confirmed") {
      finished = true;
      decided.resolve(m.result);
      wakeUp();
    }
  };
  w.onerror = (e: ErrorEvent) => {
    finished = true;
    decided.reject(new Error(`duplicate confirmation failed: ${e.message}`));
    wakeUp();
  };
  w.postMessage({ type: "confirm", suspects });
  const reader = stream.getReader();
  try {
    while (!finished) {
      const { value, done } = await reader.read();
      if (done) {
        w.postMessage({ type: "confirm-end" });
        break;
      }
      if (finished) break;
      // Transfer the chunk when it owns its whole buffer, else a copy.
      const chunk = value.byteOffset === 0 && value.byteLength === value.buffer.byteLength ? value : value.slice();
      inFlight += chunk.byteLength;
      w.postMessage(chunk, [chunk.buffer as ArrayBuffer]);
      if (inFlight > MAX_IN_FLIGHT && !finished) await new Promise<void>((r) => (wake = r));
    }
    return await decided.promise;
  } finally {
    reader.cancel().catch(() => {});
    w.terminate();
  }
}

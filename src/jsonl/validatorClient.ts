// Main-thread handle on an upload's validation Workers (see
// validate.worker.ts): up to N scanners that check lines, and a finder that
// puts their blocks back in the file's order, enforces the request limit and
// finds repeated custom_ids. The bytes are gathered into ~1 MB blocks cut
// at line ends (./lineBlocks.ts: one copy, then a transfer), each sent to
// the scanner with the least in hand, so validation runs on as many cores as
// there are scanners while the HTTP thread only moves bytes. An upload
// starts with one scanner; another joins whenever even the least busy one is
// GROW_AT blocks behind, up to N: a small upload, or one that stalls, holds
// two Workers (what src/files/uploadSlots.ts bounds). At most maxPending
// blocks may be sent and not yet taken by the finder, so a slow validator
// slows the upload instead of growing memory. Each scanner gives its block back with
// its ack and the block is filled again: an upload of any size cycles
// through the same few blocks instead of leaving hundreds for the GC.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { ValidationResult } from "./batchFileValidator";
import type { ConfirmedDuplicate } from "./confirm";
import { SPILL_PARTITIONS, type FinderOptions, type Suspect } from "./duplicateFinder";
import { LineBlocks } from "./lineBlocks";
import { VALIDATE_WORKER } from "../workers";

const BLOCK = 1 << 20;
/** Bytes confirmInWorker lets wait in its Worker. */
const MAX_IN_FLIGHT = 8 << 20;
/** Blocks sent and not yet taken in order by the finder: 8 MB, or two a scanner where there are more. */
const maxPending = (scanners: number) => Math.max(8, 2 * scanners);

/**
 * Workers kept for the next upload after a clean finish. A fresh Worker is a
 * new JS VM whose JIT starts cold (≈0.5 CPU-s of compiling per 1M-line
 * upload, measured); a kept one validates at full speed from its first line.
 * A Worker is reused only after it has answered for every block it was
 * given and the finder with its result, so no message of an earlier upload
 * can reach the next one. One upload's set is kept (its scanners and its
 * finder); idle, each costs its thread and its VM, no buffers.
 */
const idle: Worker[] = [];
/** Set by each upload (its scanners and its finder). */
let keepIdle = 0;
/** Validator Workers held by uploads now (idle ones apart): scanners + 1 per upload, so bounded by the upload limit (src/files/uploadSlots.ts). */
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
  if (idle.length >= keepIdle) return void w.terminate();
  w.onmessage = null;
  w.onerror = null;
  w.postMessage({ type: "release" });
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
  /** Scanner Workers (the upload uses one more, the finder): config uploadValidationWorkers. */
  scanners?: number;
  /** Bytes a block holds before it is cut (tests make it small to cut files into many blocks). */
  blockBytes?: number;
}

interface Scanner {
  worker: Worker;
  /** Blocks it has not answered for yet. */
  held: number;
  /** Blocks it was sent in all. */
  sent: number;
}

/** A scanner is added when the least busy one holds this many blocks (it is behind), up to the upload's count. */
const GROW_AT = 2;

export class ValidatorClient {
  private readonly scanners: Scanner[] = [];
  private readonly maxScanners: number;
  /** Takes the blocks in order, counts requests, finds repeated custom_ids. */
  private readonly finder: Worker;
  private readonly blocks: LineBlocks;
  private readonly blockBytes: number;
  private readonly free: Uint8Array<ArrayBuffer>[] = [];
  /** Blocks sent, and blocks the finder has taken in order. */
  private sent = 0;
  private sequenced = 0;
  /** Blocks sent that their scanner has not answered for yet. */
  private unanswered = 0;
  private readonly maxPending: number;
  private drained: (() => void) | null = null;
  private allAnswered: (() => void) | null = null;
  private readonly resultPromise: Promise<ValidationResult>;
  private closed = false;
  /** True as soon as any Worker has seen a bad line (or the request limit passed, or too many suspect duplicates). */
  failed = false;
  /** Prefix of this upload's spill files, removed here if the finder is terminated before it removes them. */
  private readonly spillPath: string | null;

  constructor(maxRequests: number, opts: ValidatorOptions = {}) {
    this.spillPath = opts.dataDir ? join(opts.dataDir, "tmp", `dupcheck-${crypto.randomUUID()}`) : null;
    this.maxScanners = Math.max(1, opts.scanners ?? 1);
    keepIdle = this.maxScanners + 1;
    this.maxPending = maxPending(this.maxScanners);
    this.blockBytes = opts.blockBytes ?? BLOCK;
    this.finder = takeWorker();
    const result = Promise.withResolvers<ValidationResult>();
    this.resultPromise = result.promise;
    this.resultPromise.catch(() => {});
    this.finder.onmessage = (e: MessageEvent) => {
      const m = e.data;
      if (m.type === "progress") {
        this.sequenced = m.sequenced;
        if (this.sent - this.sequenced <= this.maxPending / 2) this.wake();
      } else if (m.type === "failed") this.fail();
      else if (m.type === "result") result.resolve(m.result);
    };
    this.onError = (e: ErrorEvent) => {
      result.reject(new Error(`validator worker failed: ${e.message}`));
      this.fail();
      this.allAnswered?.();
    };
    this.finder.onerror = this.onError;
    const options: FinderOptions = { memoryBytes: opts.duplicateCheckBytes, spillPath: this.spillPath };
    this.finder.postMessage({ type: "init-finder", maxRequests, options });
    // One scanner to start with: a small upload (or one that stalls) holds two Workers; more join when it falls behind.
    this.addScanner();
    this.blocks = new LineBlocks(
      this.blockBytes,
      (block, length) => this.send(block, length),
      () => this.free.pop() ?? new Uint8Array(this.blockBytes),
    );
  }

  private readonly onError: (e: ErrorEvent) => void;

  private fail(): void {
    this.failed = true;
    // No more blocks will be sent: an upload waiting for room must not wait.
    this.wake();
  }

  /** A scanner for this upload, with its own channel to the finder. */
  private addScanner(): void {
    const s: Scanner = { worker: takeWorker(), held: 0, sent: 0 };
    this.scanners.push(s);
    s.worker.onmessage = (e: MessageEvent) => {
      const m = e.data;
      if (m.type === "ack") {
        s.held--;
        if (--this.unanswered === 0) this.allAnswered?.();
        if (m.block.byteLength === this.blockBytes) this.free.push(m.block);
      } else if (m.type === "failed") this.fail();
    };
    s.worker.onerror = this.onError;
    const { port1, port2 } = new MessageChannel();
    // The finder listens before this scanner can send it anything (a port holds its messages until then).
    this.finder.postMessage({ type: "add-scanner", port: port2 }, [port2]);
    s.worker.postMessage({ type: "init-scanner", port: port1 }, [port1]);
  }

  private wake(): void {
    const d = this.drained;
    this.drained = null;
    d?.();
  }

  /** Blocks sent to each scanner so far (how the work was spread; a scanner joins when the others are behind). */
  get blocksPerScanner(): number[] {
    return this.scanners.map((s) => s.sent);
  }

  /** Copies `chunk`; resolves when the Workers have room for more. */
  async write(chunk: Uint8Array): Promise<void> {
    // The verdict is in (the first bad line of the file is in a block already sent): the rest need not be read.
    if (this.failed) return;
    this.blocks.write(chunk);
    if (this.sent - this.sequenced >= this.maxPending && !this.failed) await new Promise<void>((r) => (this.drained = r));
  }

  /** A block to the scanner with the fewest in hand (a new one if even that one is behind). */
  private send(block: Uint8Array<ArrayBuffer>, length: number): void {
    let to = this.scanners[0]!;
    for (const s of this.scanners) if (s.held < to.held) to = s;
    if (to.held >= GROW_AT && this.scanners.length < this.maxScanners && !this.closed) {
      this.addScanner();
      to = this.scanners.at(-1)!;
    }
    to.held++;
    to.sent++;
    this.unanswered++;
    to.worker.postMessage({ type: "block", seq: this.sent++, block, length }, [block.buffer]);
  }

  async finish(): Promise<ValidationResult> {
    if (!this.failed) this.blocks.end();
    this.finder.postMessage({ type: "end", blocks: this.sent });
    let result: ValidationResult;
    try {
      result = await this.resultPromise;
      // Every block answered for: nothing of this upload can reach a Worker's next one.
      if (this.unanswered > 0) await new Promise<void>((r) => (this.allAnswered = r));
    } catch (e) {
      this.close();
      throw e;
    }
    if (!this.closed) {
      this.closed = true;
      for (const s of this.scanners) giveBack(s.worker);
      giveBack(this.finder);
    }
    return result;
  }

  /** Abandons the upload: the Workers may still hold parts of it, so they are not reused. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.scanners) end(s.worker);
    end(this.finder);
    this.wake();
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

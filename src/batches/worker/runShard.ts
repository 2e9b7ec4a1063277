// Executes one shard: recovers what its part files say is done, streams the
// shard's byte range of the input, runs every line not yet done, and appends
// result lines to the part files. Writes are flushed as soon as the current
// turn of the event loop ends, so a line whose result is computed is on disk
// (in the page cache, which survives a process kill) before more work waits.
// Before the shard reports "done" or "paused", its part files and their
// directory entries are fsynced (the runner may finalize the batch as soon as
// every shard is done): a batch never reaches a final state with result bytes
// that an OS crash could still lose. With the files on S3, a finished shard's
// part files are then uploaded by this Worker, each as its own object (the
// parts of the output and error files), before "done": finalize only names
// them, and the main thread never moves their bytes.
import { closeSync, fstatSync, openSync, statSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { fsyncEnabled, syncDir, syncFd } from "../../fsync";
import { readLines } from "../../jsonl/lineReader";
import type { FromWorker, PricedModel, RunTask, ShardTotals } from "../types";
import { runBuiltin, runLine, stoppedLine, type BatchRequest, type LineResult, type ShardControl } from "./execute";
import { recoverParts } from "./partFiles";
import { endpointKind } from "../../endpoints";
import { addUsage } from "./usage";
import { limitNow, setSlotBatch } from "./slots";
import { countLine, takeWorkerMetrics } from "../../metrics/worker";
import { bucketOf } from "../../storage/bucket";
import { openLocator } from "../../storage/locator";
import { CHECKPOINT_MS, PartCheckpoints } from "./checkpoints";
import { worked } from "./garbage";
import { giveTurn, holdsTurn, takeTurn } from "./turns";
import { PrefixGroups, WAIT } from "./prefixGroups";
import { replicasOf } from "./replicas";
import { prefixKey } from "../../inference/replicas/pick";
import { WAIT_POLL_MS, placementOf, type Grouped } from "./placement";



/**
 * A part file's buffered results are written once they reach this (and at
 * the end of every turn of the event loop). 256 KiB, not 1 MiB: the buffer
 * is paid per Worker (docs/CONTRACT.md §20), and a quarter of it cost no speed
 * (bench/workers-rss.ts, 2 Workers: 5.5–7.0 s against 5.0–7.7 s, peak RSS
 * 178–189 MB against 189–199).
 */
const FLUSH_BYTES = 256 << 10;
/** While a shard runs, each part file is flushed to disk (fdatasync, on the thread pool) every this many bytes, so the flush before "done" is small. */
const SYNC_BYTES = 32 << 20;
const PROGRESS_MS = 250;

/**
 * Result lines are encoded straight into a buffer that is used again and
 * again (a few per Worker, pooled here), not joined into a string that
 * writeSync then encodes: two fresh megabytes per flush make the allocator
 * purge and fault pages back in all the time (MIMALLOC_PURGE_DELAY, see
 * src/allocator.ts).
 */
const BUFFER_BYTES = 2 * FLUSH_BYTES;
const spareBuffers: Uint8Array[] = [];
const encoder = new TextEncoder();

class PartWriter {
  private buf: Uint8Array | null = null;
  /** Bytes of `buf` waiting to be written. */
  private len = 0;
  private scheduled = false;
  /** The file's size: what recovery kept plus what this run wrote. */
  private size: number;
  private nextSyncAt: number;
  private syncing: Promise<void> | null = null;
  private syncError: unknown = null;
  constructor(
    private readonly fd: number,
    private readonly path: string,
  ) {
    this.size = fstatSync(fd).size;
    this.nextSyncAt = this.size + SYNC_BYTES;
  }

  /** Bytes in the file (whole lines): what recovery kept plus what this run wrote so far. */
  get written(): number {
    return this.size;
  }

  push(line: string): void {
    const buf = (this.buf ??= spareBuffers.pop() ?? new Uint8Array(BUFFER_BYTES));
    let r = encoder.encodeInto(line, buf.subarray(this.len));
    if (r.read < line.length) {
      // Did not fit: what is buffered goes first, then the line from the start.
      this.flush();
      r = encoder.encodeInto(line, buf);
      if (r.read < line.length) {
        // Longer than the buffer: written as it is.
        this.size += writeSync(this.fd, line);
        this.afterWrite();
        return;
      }
    }
    this.len += r.written;
    if (this.len >= FLUSH_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  flush(): void {
    this.scheduled = false;
    if (this.len === 0) return;
    let off = 0;
    while (off < this.len) off += writeSync(this.fd, this.buf!, off, this.len - off);
    this.size += this.len;
    this.len = 0;
    this.afterWrite();
  }

  private afterWrite(): void {
    if (this.size >= this.nextSyncAt && this.syncing === null && fsyncEnabled()) {
      this.nextSyncAt = this.size + SYNC_BYTES;
      this.syncing = syncFd(this.fd, this.path, this.size)
        .catch((e) => void (this.syncError ??= e))
        .finally(() => (this.syncing = null));
    }
  }

  /** Writes what is buffered, flushes the file to disk if `durable`, and closes it (also when the flush fails). */
  async close(durable: boolean): Promise<void> {
    this.flush();
    try {
      // A flush in flight uses the descriptor: wait for it before closing.
      while (this.syncing) await this.syncing;
      if (durable) {
        if (this.syncError) throw this.syncError;
        await syncFd(this.fd, this.path, this.size);
      }
    } finally {
      closeSync(this.fd);
      if (this.buf && spareBuffers.length < 4) spareBuffers.push(this.buf);
      this.buf = null;
    }
  }
}

/**
 * fsync of the directories that hold the part files, and of the two above
 * them: the part files' names, the batch directory's name and the batches
 * directory's own name (the runner creates them with mkdir -p).
 */
async function syncPartDirs(paths: string[]): Promise<void> {
  const dirs = new Set<string>();
  for (const p of paths) for (let d = dirname(p), i = 0; i < 3; d = dirname(d), i++) dirs.add(d);
  await Promise.all([...dirs].map(syncDir));
}

export async function runShard(task: RunTask, models: Map<string, PricedModel>, control: ShardControl, post: (m: FromWorker) => void): Promise<void> {
  // Reading and running lines is CPU work: it goes by turns (../turns.ts),
  // taken before the first byte is read (a Worker that waits for one holds
  // none of its shard yet), given back while the loop waits on requests in
  // flight, and when the lines are done.
  await takeTurn();
  setSlotBatch(task.batchId);
  // With the files in a bucket, the part files are checkpointed there while
  // the shard runs (checkpoints.ts): first, take what an earlier run left.
  const t = task.partTargets;
  const ckpt = t ? { out: new PartCheckpoints(t.out.checkpoints, task.outPath, task.claim), err: new PartCheckpoints(t.err.checkpoints, task.errPath, task.claim) } : null;
  if (ckpt) await Promise.all([ckpt.out.restore(), ckpt.err.restore()]);
  const { done, totals } = await recoverParts(task.outPath, task.errPath);
  const kind = endpointKind(task.endpoint);
  if (task.stopCode) control.stopCode ??= task.stopCode;
  const out = new PartWriter(openSync(task.outPath, "a"), task.outPath);
  const err = new PartWriter(openSync(task.errPath, "a"), task.errPath);
  const record = (r: LineResult, model: PricedModel | undefined, modelId = model?.id ?? "unknown") => {
    countLine(modelId, r.ok);
    unsent = true;
    worked(r.line.length);
    if (r.ok) {
      totals.completed++;
      out.push(r.line);
    } else {
      totals.failed++;
      err.push(r.line);
    }
    if (r.usage) addUsage(totals, r.usage, model, kind);
  };
  // A progress message goes out with a result (an upstream one, or a chunk's
  // worth of built-in ones) if the last one is PROGRESS_MS old; a timer sends
  // what that held back. (Without it, a burst of completions shows as one,
  // then nothing until the next request finishes: a whole upstream latency
  // later, seconds to minutes for a model.)
  let lastProgress = Date.now();
  let unsent = false;
  const postProgress = () => {
    unsent = false;
    post({ type: "progress", batchId: task.batchId, idx: task.idx, totals: { ...totals }, metrics: takeWorkerMetrics() });
  };
  const progress = () => {
    const now = Date.now();
    if (now - lastProgress >= PROGRESS_MS) {
      lastProgress = now;
      postProgress();
    }
  };
  const heldBack = setInterval(() => unsent && postProgress(), 2 * PROGRESS_MS);
  const checkpointing = ckpt
    ? setInterval(() => {
        out.flush();
        err.flush();
        ckpt.out.tick(out.written);
        ckpt.err.tick(err.written);
      }, CHECKPOINT_MS)
    : null;

  // Requests in flight, and the line loop's single waiter: woken by every
  // completion, it re-checks its condition (room for one more, or none left).
  // Promise.race over the in-flight set cost a reaction per request per line.
  let inFlight = 0;
  let wake: (() => void) | null = null;
  let failure: unknown = null;
  const nextCompletion = () => new Promise<void>((r) => (wake = r));
  let paused = false;
  let finished = false;
  // Per model with several replicas: its prefix window (./prefixGroups.ts).
  const windows = new Map<string, PrefixGroups<Grouped>>();
  // Upstream (or a built-in with simulated latency): bounded concurrency.
  // On a limited model the scheduler bounds what really runs. No extra
  // lines queue for a slot: while none wait in the scheduler, Workers
  // take free slots from shared memory without a message (slots.ts).
  const send = async (req: BatchRequest, model: PricedModel, finished?: () => void, replica = -1, key: number | null = null) => {
    const bound = boundFor(model, task);
    if (inFlight >= bound) {
      giveTurn();
      while (inFlight >= bound) await nextCompletion();
    }
    if (failure) {
      finished?.();
      throw failure;
    }
    inFlight++;
    runLine(req, model, task, control, replica, key)
      .then(
        (r) => {
          // A result that arrives after a stop still counts: the request ran.
          // null: a pause cut its retries short; it stays undone for the restart.
          if (r) {
            record(r, model);
            progress();
          } else paused = true;
        },
        (e) => void (failure ??= e),
      )
      .finally(() => {
        inFlight--;
        finished?.();
        const w = wake;
        wake = null;
        w?.();
      });
  };
  const sendNextGrouped = async (g: PrefixGroups<Grouped>) => {
    const next = g.next();
    if (next === undefined) return;
    if (next === WAIT) {
      // Nothing may go now: this shard's groups wait on their first lines, or
      // the replicas' open groups are other shards' (their windows share the
      // count, ./placement.ts). Until a line of this shard finishes, or a
      // moment passes (another shard's progress wakes nobody here).
      giveTurn();
      await (inFlight > 0 ? Promise.race([nextCompletion(), Bun.sleep(WAIT_POLL_MS)]) : Bun.sleep(WAIT_POLL_MS));
      return;
    }
    const { req, model, chars } = next.item;
    g.sent(chars);
    if (control.stopCode) {
      record(stoppedLine(req.custom_id, control.stopCode), undefined, model.id);
      g.ended(next);
    } else await send(req, model, () => g.ended(next), next.replica, next.key);
  };
  try {
    const stream = openLocator(task.input).slice(task.start, task.end).stream();
    outer: for await (const lines of readLines(stream)) {
      for (const { text } of lines) {
        if (isBlank(text)) continue;
        worked(text.length);
        const req = JSON.parse(text) as BatchRequest;
        if (done.has(req.custom_id)) {
          const usage = done.get(req.custom_id);
          if (usage) addUsage(totals, usage, models.get(req.body.model as string), kind);
          continue;
        }
        if (control.pausing) {
          paused = true;
          break outer;
        }
        if (control.stopCode) {
          record(stoppedLine(req.custom_id, control.stopCode), undefined, String(req.body.model));
          continue;
        }
        const model = models.get(req.body.model as string);
        if (!model) throw new Error(`model ${String(req.body.model)} vanished from the registry`);
        if (model.kind !== "upstream" && model.latencyMs === 0 && !model.limited) {
          // Back to CPU work after a wait on requests in flight: a turn again.
          if (!holdsTurn()) await takeTurn();
          record(runBuiltin(req, model, kind, task.answerShape), model);
          continue;
        }
        // A model with several replicas: its lines wait in the prefix window,
        // grouped by prefix (./prefixGroups.ts), and go out from there.
        const replicas = model.kind === "upstream" ? replicasOf(model.upstream).length : 0;
        if (replicas > 1) {
          let w = windows.get(model.id);
          if (!w) windows.set(model.id, (w = new PrefixGroups(placementOf(model, boundFor(model, task)))));
          w.add(prefixKey(model.upstreamModel ?? model.id, req.body), { req, model, chars: text.length }, text.length);
          while (w.full && !control.pausing && !control.stopCode) await sendNextGrouped(w);
          continue;
        }
        await send(req, model);
      }
      progress();
      // Give finished requests' writes and incoming control messages a turn.
      if (inFlight === 0) await new Promise((r) => setImmediate(r));
    }
    // The window's last lines (a pause leaves them undone; a stop records them stopped).
    for (const w of windows.values()) while (w.lines > 0 && !control.pausing) await sendNextGrouped(w);
    if (control.pausing && [...windows.values()].some((w) => w.lines > 0)) paused = true;
    finished = true;
  } finally {
    // Its prefix groups stop counting on their replicas (the other shards' windows open theirs).
    for (const w of windows.values()) w.release();
    // The shard's last requests, also when the loop failed: they write to
    // these files when they finish; closing first could let a later shard
    // reuse the descriptor numbers and receive their lines.
    // What is left waits (on upstreams, on the disk): without a turn.
    giveTurn();
    while (inFlight > 0) await nextCompletion();
    clearInterval(heldBack);
    if (checkpointing) clearInterval(checkpointing);
    // A failed shard runs again from what its parts hold: no flush needed.
    const durable = finished && !failure;
    await Promise.all([out.close(durable), err.close(durable)]);
    // A run that fails (the bucket gone for longer than its retries, say)
    // still puts every line it finished into the bucket if it can: the
    // shard may run next on another node, which must not send them again.
    if (ckpt && !durable) await Promise.all([ckpt.out.flush(out.written), ckpt.err.flush(err.written)]).catch(() => {});
  }
  if (failure) throw failure;
  await syncPartDirs([task.outPath, task.errPath]);
  // Paused (a stop, an outage): every line finished so far goes to the
  // bucket, so whichever node runs the shard next sends none of them again.
  if (paused && ckpt) await Promise.all([ckpt.out.flush(out.written), ckpt.err.flush(err.written)]);
  if (!paused) {
    await uploadParts(task);
    // The segments are not needed any more. Removing them is tidying, not
    // the shard's work: if it fails (after its retries), what is left goes
    // with the file's parts when the file is deleted.
    if (ckpt) await Promise.all([ckpt.out.clear(), ckpt.err.clear()]).catch(() => {});
  }
  post({ type: paused ? "paused" : "done", batchId: task.batchId, idx: task.idx, totals, metrics: takeWorkerMetrics() });
}

/** A finished shard's non-empty part files, each to its object in the bucket (a no-op on local disk). */
async function uploadParts(task: RunTask): Promise<void> {
  const targets = task.partTargets;
  if (!targets) return;
  const up = async (path: string, target: (typeof targets)["out"]) => {
    if (statSync(path).size === 0) return;
    await bucketOf(target.object.s3).put(target.object.key, Bun.file(path));
  };
  await Promise.all([up(task.outPath, targets.out), up(task.errPath, targets.err)]);
}

/**
 * Lines of this shard in flight at once. On a limited model: the model's
 * limit on this node now (fixed, a cluster share, or what its controller
 * found) and a quarter more, at least 1. The quarter keeps a few of the
 * shard's lines waiting in the scheduler, so that a slot coming free goes
 * to the batch first in the order even between two of its lines. A bound
 * far above the limit only queues lines in the scheduler (each holding its
 * request built and its place in every queue; a pause withdraws them,
 * slots.ts cancelAsks, but they are read and built again later). A bound
 * below the limit keeps one shard from filling it, and an adaptive limit
 * grows only while it is full (inference/admission/adaptive.ts): "auto"
 * would stop at the bound for a batch of one shard. Elsewhere (an unlimited
 * model, or a limit this Worker cannot see): the task's bound.
 */
export function boundFor(model: PricedModel, task: RunTask): number {
  const limit = model.limited ? limitNow(model.id) : null;
  return limit === null ? task.concurrency : Math.max(1, limit + Math.ceil(limit / 4));
}

function isBlank(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c !== 32 && c !== 9 && c !== 13) return false;
  }
  return true;
}

export type { ShardTotals };

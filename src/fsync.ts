// Making bytes durable: fdatasync of files and fsync of directories, always
// off the calling thread (Bun runs the callback and promise forms of node:fs
// on its thread pool: checked with `strace -f`, the fdatasync/fsync calls
// come from pool threads, never from the main thread or a Worker's), so the
// event loop keeps answering while the disk works. Used by the upload writer
// (src/storage/localDisk.ts), the batch part writer (src/batches/worker/
// runShard.ts) and the database's commit sync (src/db/client.ts).
//
// A file is durable once its data is fdatasync'ed (which includes its size);
// a new name (create, rename, mkdir) once its directory is fsync'ed. An fsync
// that fails means the kernel may have dropped the dirty pages: the caller
// must not acknowledge, so every function here rejects with the error.
//
// Two settings each thread holds (src/threadSettings.ts: config.ts sets the
// main thread's, a batch Worker gets its own in its init message; all
// threads agree):
//
// - OFFPEAK_UNSAFE_NO_FSYNC=1 — skip every flush offpeak makes (SQLite keeps
//   its own, at checkpoints). **For benchmarks only**
//   (bench/upload.ts compares uploads with and without flushing): an OS crash
//   or power loss can then lose acknowledged files and records.
// - OFFPEAK_TEST_FSYNC_LOG=PATH (tests only) — append one JSON line per
//   completed flush ({op, path, bytes?, thread, t}) to PATH, and
//   OFFPEAK_TEST_FSYNC_DELAY_MS=N (main thread) and
//   OFFPEAK_TEST_FSYNC_WORKER_DELAY_MS=N (Workers) — wait N ms before each
//   flush. Together they let a test prove that an answer comes after the
//   flushes it depends on (test/durability.test.ts): with the delay, an
//   answer sent before its flush finished arrives before the flush's line is
//   in the log.
// node:fs only (callback forms: on the thread pool): this module loads in every
// batch Worker, and node:worker_threads and node:fs/promises cost each Worker
// 0.4 and 0.2 MB more (docs/CONTRACT.md §20; docs/OPERATING.md "Batch Workers").
import { appendFileSync, close, closeSync, fdatasync, fsync, fsyncSync, open, openSync } from "node:fs";
import { threadSettings } from "./threadSettings";

const isMainThread = Bun.isMainThread;

/** Whether offpeak flushes (false only with OFFPEAK_UNSAFE_NO_FSYNC=1): this thread's setting (src/threadSettings.ts). */
export const fsyncEnabled = (): boolean => threadSettings().fsync;

/** Test seam: records a completed flush (or a step around one, e.g. a rename) when OFFPEAK_TEST_FSYNC_LOG is set. */
export function noteDurable(op: "file" | "dir" | "rename" | "db", path: string, extra: Record<string, unknown> = {}): void {
  const log = threadSettings().testFsyncLog;
  if (!log) return;
  appendFileSync(log, JSON.stringify({ op, path, ...extra, thread: isMainThread ? "main" : "worker", t: performance.timeOrigin + performance.now() }) + "\n");
}

/** Test seam: the wait OFFPEAK_TEST_FSYNC_DELAY_MS asks for before each flush (none otherwise). */
export const flushDelayForTests = () => {
  const ms = threadSettings().testFsyncDelayMs;
  return ms > 0 ? new Promise((r) => setTimeout(r, ms)) : null;
};

/**
 * fdatasync(fd) on the thread pool. `path` and `bytes` only label the test
 * log. The caller must not close `fd` before this settles (a reused
 * descriptor number would be flushed instead).
 */
export async function syncFd(fd: number, path: string, bytes?: number): Promise<void> {
  if (!fsyncEnabled()) return;
  await flushDelayForTests();
  await new Promise<void>((resolve, reject) => fdatasync(fd, (e) => (e ? reject(e) : resolve())));
  noteDurable("file", path, bytes === undefined ? {} : { bytes });
}

/** fsync of a directory (its entries: files created, renamed or removed in it), on the thread pool. */
export async function syncDir(path: string): Promise<void> {
  if (!fsyncEnabled()) return;
  await flushDelayForTests();
  const fd = await new Promise<number>((resolve, reject) => open(path, "r", (e, fd) => (e ? reject(e) : resolve(fd))));
  try {
    await new Promise<void>((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
  } finally {
    await new Promise<void>((resolve, reject) => close(fd, (e) => (e ? reject(e) : resolve())));
  }
  noteDurable("dir", path);
}

/** The same, blocking: only for start-up (once, before serving) and short CLI runs. */
export function syncDirNow(path: string): void {
  if (!fsyncEnabled()) return;
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  noteDurable("dir", path);
}

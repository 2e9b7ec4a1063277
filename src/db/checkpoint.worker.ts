// SQLite's WAL checkpoints, off the HTTP thread. A checkpoint copies the
// WAL's pages into the database file and fsyncs both; SQLite runs it in the
// connection that commits past wal_autocheckpoint pages — the server's one
// connection, on the main thread, where an fsync that waits behind a busy
// disk (an upload's flushes, a batch's part files) stops every request. So
// the server turns autocheckpoint off and this Worker, with a connection
// of its own, checkpoints whenever the WAL has grown past CHECKPOINT_BYTES
// (checked every CHECK_MS). PASSIVE: it never waits for the server's
// readers or writers; what it cannot copy now it copies next time.
import { Database } from "bun:sqlite";
import { statSync } from "node:fs";

declare const self: Worker;

const CHECK_MS = 500;
/** About SQLite's default autocheckpoint (1000 pages of 4 KiB). */
const CHECKPOINT_BYTES = 4 << 20;

export type CheckpointStart = { path: string };

self.onmessage = (e: MessageEvent<CheckpointStart>) => {
  const db = new Database(e.data.path);
  db.exec("PRAGMA busy_timeout = 5000");
  db.exec("PRAGMA synchronous = NORMAL");
  const checkpoint = db.query("PRAGMA wal_checkpoint(PASSIVE)");
  let copiedUpTo = 0;
  setInterval(() => {
    let size = 0;
    try {
      size = statSync(`${e.data.path}-wal`).size;
    } catch {
      return;
    }
    // The WAL file does not shrink; it is rewound once fully copied. Check again when it grew.
    if (size < CHECKPOINT_BYTES || size === copiedUpTo) return;
    try {
      checkpoint.get();
      copiedUpTo = size;
    } catch {
      // Busy or locked: the next check tries again.
    }
  }, CHECK_MS);
};

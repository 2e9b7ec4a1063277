// Least exposure on disk (docs/CONTRACT.md §16): the data directory is 0700 and every
// file in it 0600. It holds webhook secrets in clear, chat messages, uploads
// and batch outputs; another local user must read none of it.
//
// One process-wide umask does this for every file and directory offpeak
// creates, wherever the code that creates it is: uploads, temp files, part
// files and checkpoints written by batch Workers (threads of this process
// share its umask), the duplicate check's spill files, and the database's
// -wal and -shm files, which SQLite creates itself. Per-call modes would
// have to be kept right at every creation site, SQLite's included.
//
// A data directory made by an older version (0755, a 0644 database) is
// tightened at start, with a log line. Only the directory and its own entries
// are changed: once the directory is 0700 nothing under it can be reached by
// another user, and walking every stored file would make a start cost grow
// with the data.
import { chmodSync, lstatSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import type { DatabaseConfig } from "./db/client";

/** Bits of the mode that give group or others any access. */
const OPEN_TO_OTHERS = 0o077;

/** Call once at start, on the main thread, before any file is created (a Worker may not set it). */
export function restrictNewFiles(): void {
  process.umask(OPEN_TO_OTHERS);
}

/** A path whose mode was too open, with the mode it had (octal, as `ls` would show it), and whether chmod took. */
export interface OpenPath {
  path: string;
  was: string;
  tightened: boolean;
}

/**
 * Sets the umask, creates the data directory 0700 or tightens an existing
 * one and its entries, and tightens a SQLite database kept elsewhere
 * (`sqlite:PATH`). Returns the paths that were too open, for the caller's
 * log. One that cannot be changed (another owner, a filesystem without
 * modes) is left as it is, with tightened: false: the caller warns and goes
 * on: a server that cannot tighten its files still serves.
 */
export function secureDataDir(dataDir: string, database: DatabaseConfig): OpenPath[] {
  restrictNewFiles();
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const found: OpenPath[] = [];
  tighten(dataDir, found);
  for (const name of readdirSync(dataDir)) tighten(join(dataDir, name), found);
  if (database.kind === "sqlite" && relative(dataDir, dirname(database.path)) !== "") {
    for (const suffix of ["", "-wal", "-shm", "-journal"]) tighten(database.path + suffix, found);
  }
  return found;
}

/** chmod 0700 (a directory) or 0600 (anything else) if group or others have any access; symlinks are left alone. */
function tighten(path: string, found: OpenPath[]): void {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return; // not there (a database file not yet created)
  }
  if (st.isSymbolicLink() || (st.mode & OPEN_TO_OTHERS) === 0) return;
  let tightened: boolean;
  try {
    chmodSync(path, st.isDirectory() ? 0o700 : 0o600);
    // Some mounts accept chmod and ignore it.
    tightened = (statSync(path).mode & OPEN_TO_OTHERS) === 0;
  } catch {
    tightened = false;
  }
  found.push({ path, was: (st.mode & 0o777).toString(8).padStart(4, "0"), tightened });
}

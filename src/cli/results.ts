// A finished batch's results on disk: its output file to --out and its
// error file to --errors, streamed (shared by `batch run` and `batches wait
// --out`), and the command that resumes a wait that was cut short.
import { accessSync, constants, existsSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { usageError } from "./args";
import type { Batch, Client } from "./http";
import { prog, shellWord } from "./program";
import { onInterrupt } from "./interrupt";
import type { Progress } from "./progress";

/** Where a batch's results go; null: not downloaded. */
export interface ResultPaths {
  out: string | null;
  errors: string | null;
}

/** "1 line", "3 lines". */
export const linesText = (n: number) => `${n.toLocaleString("en-US")} ${n === 1 ? "line" : "lines"}`;

/** A usage error now, before anything is done, if `path` cannot be written later. */
export function checkWritable(path: string, flag: string): void {
  try {
    accessSync(dirname(path) || ".", constants.W_OK);
  } catch {
    throw usageError(`${flag} ${path}: its folder does not exist or is not writable`);
  }
  // A folder given where a file is meant: the batch would run and its results have nowhere to go.
  if (existsSync(path) && statSync(path).isDirectory()) throw usageError(`${flag} ${path} is a folder: give a file name`);
}

/**
 * Downloads a finished batch's output to `paths.out` (an empty file when it
 * has none) and its error file to `paths.errors` (an older file there is
 * removed when the batch has none: it would pass for this batch's). Returns
 * one line per file saying what was written. A failed batch has no results:
 * nothing is written.
 */
export async function downloadResults(client: Client, b: Batch, paths: ResultPaths, progress: Progress): Promise<string> {
  if (b.status === "failed") return "";
  // Ctrl-C here: the batch has ended, and the same command downloads it again.
  let current: string | null = null;
  const interrupted = () => {
    progress.finishLine();
    if (current) rmSync(`${current}.part`, { force: true });
    // Written at once (process.exit drops what a pipe has not taken yet).
    writeSync(2, `\ninterrupted: the download of batch ${b.id}'s results stopped (the batch is ${b.status})\n  to download them: ${waitCommand(b.id, paths)}\n`);
    process.exit(130);
  };
  const restore = onInterrupt(interrupted);
  const download = async (fileId: string, path: string, label: string) => {
    current = path;
    await client.download(fileId, path, (done, total) => progress.update({ label, done, total, unit: "B" }));
    progress.finishLine();
  };
  try {
    return await downloadAll(b, paths, download);
  } finally {
    restore();
  }
}

async function downloadAll(b: Batch, paths: ResultPaths, download: (fileId: string, path: string, label: string) => Promise<void>): Promise<string> {
  const c = b.request_counts;
  let summary = "";
  if (paths.out !== null) {
    if (b.output_file_id) await download(b.output_file_id, paths.out, "downloading");
    else writeFileSync(paths.out, "");
    summary += `results: ${paths.out} (${linesText(c.completed)})\n`;
  }
  if (paths.errors !== null) {
    if (b.error_file_id) {
      await download(b.error_file_id, paths.errors, "downloading errors");
      summary += `errors: ${paths.errors} (${linesText(c.failed)})\n`;
    } else if (existsSync(paths.errors)) {
      rmSync(paths.errors, { force: true });
      summary += `errors: none (removed ${paths.errors} from an earlier run)\n`;
    }
  } else if (b.error_file_id && c.failed > 0) {
    summary += `errors: ${linesText(c.failed)} failed, not downloaded (${prog()} files download ${b.error_file_id} --out FILE)\n`;
  }
  return summary;
}

/** `… batches wait ID [--out F] [--errors F]`: follows the batch again and, with paths, downloads what it gives. */
export function waitCommand(id: string, paths: ResultPaths | null): string {
  let cmd = `${prog()} batches wait ${id}`;
  if (paths?.out) cmd += ` --out ${shellWord(paths.out)}`;
  if (paths?.errors) cmd += ` --errors ${shellWord(paths.errors)}`;
  return cmd;
}

/** What to run now that this process stops following a batch that keeps running. */
export function stillRunningHint(id: string, paths: ResultPaths | null): string {
  const follow = paths && (paths.out || paths.errors) ? "to follow it and download the results when it ends" : "to follow it";
  return `  ${follow}: ${waitCommand(id, paths)}\n  to stop it: ${prog()} batches cancel ${id}\n`;
}

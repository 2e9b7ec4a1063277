// offpeak batch run FILE.jsonl: upload (streamed), create the batch, follow
// it, download the results (streamed) — one command for the whole round trip.
import { closeSync, existsSync, openSync, readSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { connection, dispatchVerb, helped, keyValues, parseVerb, positionals, usageError, type Parsed } from "./args";
import { createBatch, FINAL_STATES, reportEnd, TIMED_OUT_EXIT, timedOutMessage, WAIT_FLAGS, WINDOW_FLAGS, waitForBatch, waitSettings, windowFlag, withProgress } from "./batches";
import { uploadWithProgress } from "./files";
import { Client } from "./http";
import { ENDPOINT_LIST } from "../endpoints";
import { formatDuration, Progress } from "./progress";
import { checkWritable, downloadResults, waitCommand, type ResultPaths } from "./results";

export const BATCH_HELP = `offpeak batch run — upload a JSONL file, run it as a batch, download the results

Usage:
  offpeak batch run FILE.jsonl [--endpoint /v1/chat/completions] [--window 24h]
                               [--out RESULTS.jsonl] [--errors ERRORS.jsonl] [--metadata key=value]...
                               [--interval SECONDS] [--progress-interval SECONDS] [--timeout SECONDS] [--quiet]

Streams FILE.jsonl to the server, creates the batch, shows progress on
stderr (a bar with done/total, rate and ETA on a terminal, and why the
batch waits when the server says so — "waiting: upstream vllm is down
(since 12:03)"; a plain line every --progress-interval seconds, default 5,
and at each such change, otherwise), and streams the results to disk when
the batch ends.

  --endpoint      default: the url of the file's first request (else /v1/chat/completions)
  --window        completion window: Nh or Nd from 1h to 7d (default 24h; --completion-window is the same)
  --out           successful lines (default: FILE.results.jsonl beside the input; always written)
  --errors        failed lines (default: FILE.errors.jsonl; written when there are any, an older one removed when not)
  --interval      seconds between status polls (default 1)
  --timeout       stop waiting after this many seconds of the batch running (exit 3;
                  the batch keeps running, nothing is downloaded)

Ctrl-C stops following, not the batch: it keeps running on the server, and
the command printed then (offpeak batches wait BATCH_ID --out … --errors …)
follows it again and downloads the results when it ends.

Connection (every client command):
  --base-url URL   API base (env OFFPEAK_BASE_URL; default http://127.0.0.1:$PORT/v1, PORT else 8080)
  --api-key KEY    API key (env OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY)

Exit codes: 0 the batch completed (some lines may have failed: see --errors);
1 the batch failed validation, expired or was cancelled; 2 bad usage, server
unreachable, or the server refused the request (its message is printed);
3 --timeout passed before the batch ended; 130 interrupted with Ctrl-C (the
batch keeps running).
`;

export function batchCommand(argv: string[]): Promise<number> {
  return dispatchVerb(argv, { name: "batch", help: BATCH_HELP, verbs: { run }, listed: "run" });
}

/**
 * The url of the file's first request line, as the batch endpoint; null if
 * the first line is not a request (then the caller must be told, not guess).
 * Reads up to the first line's end, which may be as far as the 4 MiB line
 * limit: a fixed-size read would cut a longer first line.
 */
export function endpointOf(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return null;
  }
  try {
    let bytes = Buffer.alloc(0);
    for (;;) {
      const chunk = Buffer.alloc(1 << 20);
      const n = readSync(fd, chunk, 0, chunk.length, bytes.length);
      bytes = Buffer.concat([bytes, chunk.subarray(0, n)]);
      const atEnd = n < chunk.length;
      const lines = bytes.toString("utf8").replace(/^\uFEFF/, "").split("\n");
      const first = lines.findIndex((l) => l.trim() !== "");
      // The first (non-blank) line, once its newline or the end of the file is read.
      if (first !== -1 && (first < lines.length - 1 || atEnd)) return urlOf(lines[first]!);
      if (atEnd || bytes.length > MAX_FIRST_LINE) return null;
    }
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** A batch line is at most 4 MiB (docs/CONTRACT.md §10), plus blank lines before it. */
const MAX_FIRST_LINE = 5 << 20;

function urlOf(line: string): string | null {
  try {
    const url = (JSON.parse(line) as { url?: unknown }).url;
    return typeof url === "string" ? url.replace(/^\/api\/v1\//, "/v1/") : null;
  } catch {
    return null;
  }
}

function defaultPath(input: string, kind: "results" | "errors"): string {
  const name = basename(input).replace(/\.jsonl?$/i, "");
  return join(dirname(input), `${name}.${kind}.jsonl`);
}

async function run(argv: string[]): Promise<number> {
  const p: Parsed = parseVerb(argv, { ...WAIT_FLAGS, endpoint: "string", ...WINDOW_FLAGS, out: "string", errors: "string", metadata: "list" });
  if (helped(p, BATCH_HELP)) return 0;
  const [input] = positionals(p, ["FILE.jsonl"], "offpeak batch run FILE.jsonl [--out RESULTS.jsonl] [--errors ERRORS.jsonl]");
  const client = new Client(connection(p));
  const out = p.flags.out ?? defaultPath(input!, "results");
  const errs = p.flags.errors ?? defaultPath(input!, "errors");
  checkWritable(out, "--out");
  checkWritable(errs, "--errors");
  if (!existsSync(input!)) throw usageError(`cannot read ${input}: no such file`);
  const endpoint = p.flags.endpoint ?? endpointOf(input!);
  if (!endpoint) throw usageError(`cannot tell the endpoint from the first line of ${input}: give --endpoint (one of ${ENDPOINT_LIST})`);
  const metadata = keyValues(p, "metadata");
  const completionWindow = windowFlag(p);
  // Checked before anything is uploaded: a typo must not leave a batch running.
  const wait = waitSettings(p);
  const started = Date.now();

  const file = await uploadWithProgress(client, input!, "batch", new Progress({ quiet: p.bools.quiet, prefix: "" }));
  const created = await createBatch(client, file.id, { endpoint, completionWindow, metadata });
  const results: ResultPaths = { out, errors: errs };
  const opts = { ...withProgress(wait, `${created.id} `), results };
  const { progress } = opts;
  progress.note(`created ${created.id} (${created.request_counts.total} requests, ${endpoint})`);
  // Said up front too (Ctrl-C prints it again): a closed terminal or a killed job gets no last word.
  progress.note(`if this stops before the batch ends, resume with: ${waitCommand(created.id, results)}`);
  const b = await waitForBatch(client, created.id, opts);
  if (!FINAL_STATES.includes(b.status)) {
    process.stderr.write(timedOutMessage(b, opts.timeoutMs!, results));
    return TIMED_OUT_EXIT;
  }

  const c = b.request_counts;
  let summary = `${b.id} ${b.status}: ${c.completed} completed, ${c.failed} failed of ${c.total} in ${formatDuration((Date.now() - started) / 1000)}\n`;
  summary += await downloadResults(client, b, results, progress);
  process.stdout.write(summary);
  reportEnd(b);
  return b.status === "completed" ? 0 : 1;
}

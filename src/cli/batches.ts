// offpeak batches create|get|list|cancel|wait, and the wait loop that
// `batch run` shares.
import { writeSync } from "node:fs";
import { CliError, connection, dispatchVerb, helped, keyValues, numberFlag, parseVerb, positionals, usageError, type Parsed } from "./args";
import { printJson, table, timeText } from "./format";
import { Client, type Batch, type List } from "./http";
import { clockTime, formatDuration, Progress, waitingNote } from "./progress";
import { prog } from "./program";
import { onInterrupt } from "./interrupt";
import { checkWritable, downloadResults, stillRunningHint, type ResultPaths } from "./results";

export const FINAL_STATES = ["completed", "failed", "expired", "cancelled"];

export const BATCHES_HELP = `offpeak batches — batches on a running offpeak server

Usage:
  offpeak batches create FILE_ID [--endpoint /v1/chat/completions] [--window 24h]
                                 [--metadata key=value]...
  offpeak batches get BATCH_ID
  offpeak batches list [--limit N] [--after BATCH_ID] [--json]
  offpeak batches cancel BATCH_ID
  offpeak batches retry BATCH_ID
  offpeak batches wait BATCH_ID [--out RESULTS.jsonl] [--errors ERRORS.jsonl]
                               [--interval SECONDS] [--progress-interval SECONDS]
                               [--timeout SECONDS] [--quiet]

create, get and cancel print the batch record (JSON); get also says on
stderr when a running batch should end and why it waits, if it does.
--window: Nh or Nd from 1h to 7d (default 24h; --completion-window is
the same). retry makes a new
batch of the failed lines of a finished one (same endpoint and window,
metadata retry_of) and prints it. list shows each batch's request counts:
COMPLETED (succeeded), FAILED and TOTAL, and Anthropic's message batches
beside the others (ENDPOINT names them, with their msgbatch_ id).

wait shows progress on stderr (a bar on a terminal, a plain line every few
seconds otherwise), then prints the final record. With --out it then
downloads the successful lines there, and with --errors the failed ones
(as batch run does; this is how to pick up a batch run stopped with
Ctrl-C). With --timeout it gives up after that many seconds (exit 3),
printing the record as it is, downloading nothing; the batch keeps running.

Connection (every client command):
  --base-url URL   API base (env OFFPEAK_BASE_URL; default http://127.0.0.1:$PORT/v1, PORT else 8080)
  --api-key KEY    API key (env OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY)

Exit codes: 0 done (wait: the batch completed); 1 wait: the batch failed,
expired or was cancelled; 2 bad usage, server unreachable, or the server
refused the request (its message is printed); 3 wait: --timeout passed
before the batch ended; 130 wait: interrupted with Ctrl-C (the batch keeps
running).
`;

export function batchesCommand(argv: string[]): Promise<number> {
  return dispatchVerb(argv, {
    name: "batches",
    help: BATCHES_HELP,
    verbs: { create, get, list, ls: list, cancel, retry, wait },
    listed: "create, get, list, cancel, retry, wait",
  });
}

export interface CreateOptions {
  endpoint: string;
  completionWindow: string;
  metadata?: Record<string, string>;
}

/** The flags naming the completion window: --window, or its older spelling --completion-window. */
export const WINDOW_FLAGS = { window: "string", "completion-window": "string" } as const;

/**
 * --window (or --completion-window): `Nh` or `Nd` from 1h to 7d (docs/CONTRACT.md §18),
 * default 24h. Checked here, before anything is uploaded: the server would
 * refuse it only after the upload.
 */
export function windowFlag(p: Parsed): string {
  const a = p.flags.window;
  const b = p.flags["completion-window"];
  if (a !== undefined && b !== undefined && a !== b) throw usageError("give --window or --completion-window, not both");
  const w = a ?? b ?? "24h";
  const m = /^([1-9]\d{0,2})([hd])$/.exec(w);
  const hours = m ? Number(m[1]) * (m[2] === "d" ? 24 : 1) : NaN;
  if (!(hours >= 1 && hours <= 168)) throw usageError(`--window ${JSON.stringify(w)}: give Nh or Nd from 1h to 7d (e.g. 1h, 12h, 24h, 48h, 7d)`);
  return w;
}

export function createBatch(client: Client, fileId: string, o: CreateOptions): Promise<Batch> {
  return client.json<Batch>("POST", "/batches", {
    json: { input_file_id: fileId, endpoint: o.endpoint, completion_window: o.completionWindow, ...(o.metadata ? { metadata: o.metadata } : {}) },
  });
}

async function create(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { endpoint: "string", ...WINDOW_FLAGS, metadata: "list" });
  if (helped(p, BATCHES_HELP)) return 0;
  const [fileId] = positionals(p, ["FILE_ID"], "offpeak batches create FILE_ID [--endpoint E] [--window 24h] [--metadata k=v]");
  const completionWindow = windowFlag(p);
  const client = new Client(connection(p));
  printJson(
    await createBatch(client, fileId!, {
      endpoint: p.flags.endpoint ?? "/v1/chat/completions",
      completionWindow,
      metadata: keyValues(p, "metadata"),
    }),
  );
  return 0;
}

async function get(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, BATCHES_HELP)) return 0;
  const [id] = positionals(p, ["BATCH_ID"], "offpeak batches get BATCH_ID");
  const b = await new Client(connection(p)).json<Batch>("GET", `/batches/${encodeURIComponent(id!)}`);
  printJson(b);
  // The record is on stdout (for jq); for a person, when and why, on stderr.
  const said = progressSummary(b);
  if (said) process.stderr.write(said + "\n");
  return 0;
}

/** A running batch's ETA and why it waits, in words ("ETA 12:45 (in 14m03s); waiting: upstream vllm is down (since 12:03)"), or "" when there is neither. */
export function progressSummary(b: Batch, now = Date.now()): string {
  const parts: string[] = [];
  if (b.estimated_completion_at) parts.push(`ETA ${clockTime(b.estimated_completion_at, now)} (in ${formatDuration(Math.max(0, b.estimated_completion_at - now / 1000))})`);
  const note = waitingNote(b.status_details, now);
  if (note) parts.push(note);
  return parts.length ? `${b.id} ${b.status}: ${parts.join("; ")}` : "";
}

async function list(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { limit: "string", after: "string", json: "boolean" });
  if (helped(p, BATCHES_HELP)) return 0;
  positionals(p, [], "offpeak batches list [--limit N] [--after BATCH_ID] [--json]");
  // Anthropic's message batches too (docs/CONTRACT.md §22): ENDPOINT says so, with their msgbatch_ id.
  const res = await new Client(connection(p)).json<List<Batch>>("GET", "/batches", { query: { limit: p.flags.limit, after: p.flags.after, include: "message_batches" } });
  if (p.bools.json) {
    printJson(res);
    return 0;
  }
  process.stdout.write(
    table(
      ["ID", "STATUS", "COMPLETED", "FAILED", "TOTAL", "CREATED", "ENDPOINT"],
      res.data.map((b) => [
        b.id,
        b.status,
        String(b.request_counts.completed),
        String(b.request_counts.failed),
        String(b.request_counts.total),
        timeText(b.created_at),
        b.api === "anthropic" ? `${b.endpoint} (anthropic ${b.message_batch_id})` : b.endpoint,
      ]),
    ),
  );
  if (res.has_more) process.stderr.write(`(more: --after ${res.last_id})\n`);
  return 0;
}

async function cancel(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, BATCHES_HELP)) return 0;
  const [id] = positionals(p, ["BATCH_ID"], "offpeak batches cancel BATCH_ID");
  printJson(await new Client(connection(p)).json<Batch>("POST", `/batches/${encodeURIComponent(id!)}/cancel`));
  return 0;
}

async function retry(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, BATCHES_HELP)) return 0;
  const [id] = positionals(p, ["BATCH_ID"], "offpeak batches retry BATCH_ID");
  printJson(await new Client(connection(p)).json<Batch>("POST", `/batches/${encodeURIComponent(id!)}/retry`));
  return 0;
}

/** --interval (poll, default 1 s), --progress-interval (plain lines, default 5 s), --timeout (none) and --quiet. */
export const WAIT_FLAGS = { interval: "string", "progress-interval": "string", timeout: "string", quiet: "boolean" } as const;

/** Exit code when --timeout passes before the batch ends (it keeps running). */
export const TIMED_OUT_EXIT = 3;

export interface WaitSettings {
  intervalMs: number;
  /** Give up after this long (null: wait until the batch ends). */
  timeoutMs: number | null;
  plainEveryMs: number;
  quiet: boolean;
}

export interface WaitOptions extends WaitSettings {
  progress: Progress;
  /** Where the caller will put the results (named in the hint printed on Ctrl-C). */
  results?: ResultPaths | null;
}

/** The wait flags, checked (a bad value is a usage error before anything is done). */
export function waitSettings(p: Parsed): WaitSettings {
  return {
    intervalMs: numberFlag(p, "interval", 1, 0.05, 3600) * 1000,
    timeoutMs: p.flags.timeout === undefined ? null : numberFlag(p, "timeout", 0, 0.05, 31 * 24 * 3600) * 1000,
    plainEveryMs: numberFlag(p, "progress-interval", 5, 0.05, 3600) * 1000,
    quiet: p.bools.quiet === true,
  };
}

export const withProgress = (s: WaitSettings, prefix: string): WaitOptions => ({ ...s, progress: new Progress({ quiet: s.quiet, plainEveryMs: s.plainEveryMs, prefix }) });

async function wait(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { ...WAIT_FLAGS, out: "string", errors: "string" });
  if (helped(p, BATCHES_HELP)) return 0;
  const [id] = positionals(p, ["BATCH_ID"], "offpeak batches wait BATCH_ID [--out RESULTS.jsonl] [--errors ERRORS.jsonl] [--interval S]");
  const client = new Client(connection(p));
  const paths: ResultPaths = { out: p.flags.out ?? null, errors: p.flags.errors ?? null };
  // Checked now: a batch that ends hours later must not find its results with nowhere to go.
  if (paths.out !== null) checkWritable(paths.out, "--out");
  if (paths.errors !== null) checkWritable(paths.errors, "--errors");
  const opts = { ...withProgress(waitSettings(p), `${id} `), results: paths };
  const final = await waitForBatch(client, id!, opts);
  printJson(final);
  if (!FINAL_STATES.includes(final.status)) {
    process.stderr.write(timedOutMessage(final, opts.timeoutMs!, paths));
    return TIMED_OUT_EXIT;
  }
  // The record is on stdout (for jq); what was written goes with the progress, on stderr.
  if (paths.out !== null || paths.errors !== null) process.stderr.write(await downloadResults(client, final, paths, opts.progress));
  reportEnd(final);
  return final.status === "completed" ? 0 : 1;
}

/** How long a wait rides out an unreachable server (a restart resumes the batch). */
const UNREACHABLE_GRACE_MS = 120_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const timedOutMessage = (b: Batch, timeoutMs: number, results: ResultPaths | null = null) =>
  `timed out after ${timeoutMs / 1000} s: batch ${b.id} is ${b.status} and keeps running on the server\n${stillRunningHint(b.id, results)}`;

/**
 * Polls the batch until it reaches a final state, drawing progress, and
 * returns it; with a timeout, returns the last record seen (not final) once
 * it passes. Ctrl-C leaves the batch running on the server.
 */
export async function waitForBatch(client: Client, id: string, { intervalMs, timeoutMs, progress, results = null }: WaitOptions): Promise<Batch> {
  const giveUpAt = timeoutMs === null ? Infinity : Date.now() + timeoutMs;
  const show = (b: Batch) => {
    const c = b.request_counts;
    progress.update({ label: b.status, done: c.completed + c.failed, total: c.total || null, failed: c.failed, unit: "lines", eta: b.estimated_completion_at ?? null, note: waitingNote(b.status_details) });
  };
  const interrupted = () => {
    progress.finishLine();
    // Written at once (process.exit drops what a pipe has not taken yet): the resume command is the point.
    writeSync(2, `\ninterrupted: batch ${id} keeps running on the server\n${stillRunningHint(id, results)}`);
    process.exit(130);
  };
  const restore = onInterrupt(interrupted);
  let lastOk = Date.now();
  let warned = false;
  let last: Batch | null = null;
  const left = () => giveUpAt - Date.now();
  try {
    // The server pushes every change (GET /batches/{id}/events); polling
    // is the fallback: an older server, or a stream that broke off.
    last = await followEvents(client, id, show, giveUpAt);
    if (last && (FINAL_STATES.includes(last.status) || Date.now() >= giveUpAt)) {
      progress.finishLine();
      return last;
    }
    for (;;) {
      let b: Batch;
      try {
        // One poll may not outlast --timeout either (at least 1 s, at most the usual 60 s).
        const timeout = Number.isFinite(giveUpAt) ? Math.min(60_000, Math.max(1000, left())) : undefined;
        b = await client.json<Batch>("GET", `/batches/${encodeURIComponent(id)}`, { timeout });
        lastOk = Date.now();
        if (warned) progress.note("server reachable again");
        warned = false;
      } catch (e) {
        // A restarting server resumes the batch: keep waiting for a while (never past --timeout).
        if (!(e instanceof CliError) || e.kind !== "connection" || Date.now() - lastOk > UNREACHABLE_GRACE_MS) throw e;
        if (left() <= 0) {
          if (!last) throw e;
          progress.finishLine();
          return last;
        }
        if (!warned) progress.note(`${e.message} Retrying for up to ${UNREACHABLE_GRACE_MS / 1000} s…`);
        warned = true;
        await sleep(Math.min(Math.max(intervalMs, 1000), Math.max(0, left())));
        continue;
      }
      last = b;
      show(b);
      if (FINAL_STATES.includes(b.status) || Date.now() >= giveUpAt) {
        progress.finishLine();
        return b;
      }
      await sleep(Math.min(intervalMs, Math.max(0, giveUpAt - Date.now())));
    }
  } finally {
    restore();
  }
}

/**
 * Follows the batch's event stream until it ends (a final state) or
 * `giveUpAt` passes; returns the last record seen, or null if the stream
 * could not be opened (then the caller polls).
 */
async function followEvents(client: Client, id: string, onBatch: (b: Batch) => void, giveUpAt: number): Promise<Batch | null> {
  let res: Response;
  try {
    res = await client.fetch("GET", `/batches/${encodeURIComponent(id)}/events`, { timeout: false, headers: { accept: "text/event-stream" } });
  } catch {
    return null; // an older server (404 Unknown route), or any other trouble: polling says what it is
  }
  if (!(res.headers.get("content-type") ?? "").startsWith("text/event-stream") || !res.body) {
    await res.body?.cancel();
    return null;
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const timer = Number.isFinite(giveUpAt) ? setTimeout(() => void reader.cancel().catch(() => {}), Math.max(0, giveUpAt - Date.now())) : null;
  let last: Batch | null = null;
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      for (let end = buf.indexOf("\n\n"); end !== -1; end = buf.indexOf("\n\n")) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = block
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart())
          .join("\n");
        if (!data) continue; // a keep-alive comment
        last = JSON.parse(data) as Batch;
        onBatch(last);
      }
    }
  } catch {
    // The connection broke: the caller polls from here on.
  } finally {
    if (timer) clearTimeout(timer);
  }
  return last;
}

/** On stderr: why a batch did not complete (validation errors, expiry, cancellation). */
export function reportEnd(b: Batch): void {
  if (b.status === "failed") {
    const errs = b.errors?.data ?? [];
    process.stderr.write(`batch ${b.id} failed${errs.length ? ":" : ""}\n`);
    for (const e of errs.slice(0, 20)) {
      const where = e.line && !/^line \d+/i.test(e.message) ? `line ${e.line}: ` : "";
      process.stderr.write(`  ${where}${e.message}${e.code ? ` (${e.code})` : ""}\n`);
    }
    if (errs.length > 20) process.stderr.write(`  … and ${errs.length - 20} more (${prog()} batches get ${b.id})\n`);
  } else if (b.status !== "completed") {
    process.stderr.write(`batch ${b.id} ${b.status}: ${b.request_counts.completed} completed, ${b.request_counts.failed} failed of ${b.request_counts.total}\n`);
  }
}

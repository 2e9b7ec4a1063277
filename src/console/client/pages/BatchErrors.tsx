// A batch's first failed lines on its page (docs/CONTRACT.md §19): the input line,
// custom_id and message of each, from the error lines written so far
// (GET /batches/{id}/output?kind=error, also while it runs), so that nobody
// has to download the error file to see why lines fail. The input line is
// found by reading the start of the input file (files:read), never all of it.
import { useEffect, useRef, useState } from "preact/hooks";
import { readLines, request } from "../api";
import { ErrorNote } from "../components";
import { fmtBytes, fmtInt } from "../format";
import { isFinal } from "../progress";
import type { Batch } from "../types";

/** How many failed lines are shown. */
export const FIRST_ERRORS = 20;
/** At most this much of the error lines is read for them. */
const ERRORS_READ_BYTES = 1 << 20;
/** At most this much of the input file is read to number them. */
const INPUT_READ_BYTES = 8 << 20;
/** While the batch runs, at most one look every this long. */
const REFRESH_MS = 3000;

export interface FailedLine {
  custom_id: string;
  /** HTTP status of the answer, if there was one. */
  status: number | null;
  code: string | null;
  message: string;
}

/** One line of an error file: `{custom_id, response: {status_code, body: {error}} | null, error: {code, message} | null}`. */
export function failedLineOf(text: string): FailedLine | null {
  let v: any;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (!v || typeof v.custom_id !== "string") return null;
  const status = typeof v.response?.status_code === "number" ? v.response.status_code : null;
  const bodyError = v.response?.body?.error;
  const err = v.error ?? (typeof bodyError === "object" ? bodyError : null);
  const message = typeof err?.message === "string" && err.message ? err.message : typeof bodyError === "string" ? bodyError : status !== null ? `HTTP ${status}` : "failed";
  return { custom_id: v.custom_id, status, code: typeof err?.code === "string" ? err.code : null, message };
}

const CUSTOM_ID = /"custom_id"\s*:\s*("(?:[^"\\]|\\.)*")/;

/** The input line of each wanted custom_id found in the first INPUT_READ_BYTES of the file. */
async function inputLines(fileId: string, wanted: Set<string>, signal: AbortSignal): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  const res = await request(`/files/${encodeURIComponent(fileId)}/content`, { signal });
  await readLines(
    res,
    (line, n) => {
      const m = CUSTOM_ID.exec(line);
      if (m) {
        try {
          const id = JSON.parse(m[1]!) as string;
          if (wanted.has(id) && !found.has(id)) found.set(id, n);
        } catch {
          /* not a request line */
        }
      }
      return found.size < wanted.size;
    },
    INPUT_READ_BYTES,
  );
  return found;
}

interface Shown {
  rows: FailedLine[];
  /** custom_id → input line; absent: not (yet) looked up or beyond what is read. */
  lines: Map<string, number>;
  /** custom_ids looked for and not found in the first INPUT_READ_BYTES. */
  beyond: Set<string>;
}

export function FailedLines({ batch: b, mayReadFiles }: { batch: Batch; mayReadFiles: boolean }) {
  const failed = b.request_counts.failed;
  const final = isFinal(b);
  const [shown, setShown] = useState<Shown | null>(null);
  const [error, setError] = useState<unknown>(null);
  const lastAt = useRef(0);
  const known = useRef<{ lines: Map<string, number>; beyond: Set<string> }>({ lines: new Map(), beyond: new Set() });
  // Looked at again while the first rows may still change: each new failure up to FIRST_ERRORS, and once at the end.
  const trigger = `${b.id}:${Math.min(failed, FIRST_ERRORS)}:${final}`;
  useEffect(() => {
    if (failed === 0) return;
    const ctrl = new AbortController();
    const wait = Math.max(0, lastAt.current + REFRESH_MS - Date.now());
    const timer = setTimeout(async () => {
      lastAt.current = Date.now();
      try {
        const rows: FailedLine[] = [];
        const res = await request(`/batches/${encodeURIComponent(b.id)}/output?kind=error`, { signal: ctrl.signal });
        await readLines(
          res,
          (text) => {
            const row = text.trim() ? failedLineOf(text) : null;
            if (row) rows.push(row);
            return rows.length < FIRST_ERRORS;
          },
          ERRORS_READ_BYTES,
        );
        const k = known.current;
        const wanted = new Set(rows.map((r) => r.custom_id).filter((id) => !k.lines.has(id) && !k.beyond.has(id)));
        if (mayReadFiles && wanted.size > 0) {
          const got = await inputLines(b.input_file_id, wanted, ctrl.signal).catch(() => null);
          if (got) for (const id of wanted) got.has(id) ? k.lines.set(id, got.get(id)!) : k.beyond.add(id);
        }
        setShown({ rows, lines: k.lines, beyond: k.beyond });
        setError(null);
      } catch (e) {
        if ((e as Error).name !== "AbortError") setError(e);
      }
    }, wait);
    return () => {
      clearTimeout(timer);
      ctrl.abort();
    };
  }, [trigger, mayReadFiles]);

  if (failed === 0) return null;
  return (
    <div class="card">
      <h2>Failed lines</h2>
      <ErrorNote error={error} />
      {!shown && !error && <p class="muted">Loading the failed lines…</p>}
      {shown && (
        <>
          <p class="muted">
            {shown.rows.length < failed
              ? `The first ${fmtInt(shown.rows.length)} of ${fmtInt(failed)} failed lines${final ? "" : " so far"}; all of them are in the error file.`
              : `${fmtInt(failed)} failed ${failed === 1 ? "line" : "lines"}${final ? "" : " so far"}.`}
          </p>
          <table class="list errors">
            <caption class="sr-only">Failed lines: input line, custom_id and message</caption>
            <thead>
              <tr>
                <th scope="col">Line</th>
                <th scope="col">custom_id</th>
                <th scope="col">Message</th>
              </tr>
            </thead>
            <tbody>
              {shown.rows.map((r, i) => {
                const line = shown.lines.get(r.custom_id);
                return (
                  <tr key={i}>
                    <td data-label="Line" title={line === undefined && shown.beyond.has(r.custom_id) ? `Not in the first ${fmtBytes(INPUT_READ_BYTES)} of the input file` : undefined}>
                      {line ?? "—"}
                    </td>
                    <td data-label="custom_id" class="mono">
                      {r.custom_id}
                    </td>
                    <td data-label="Message">
                      <div>
                        {r.message}
                        {(r.code || r.status !== null) && <span class="muted"> ({[r.status !== null ? `HTTP ${r.status}` : null, r.code].filter(Boolean).join(", ")})</span>}
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}

// One batch: live from its event stream (docs/CONTRACT.md §12), polling if the stream
// cannot be had; timestamps, errors with their line numbers, the first failed
// lines (BatchErrors.tsx), metadata, and
// what the key may do with it (cancel, retry the failed lines, downloads).
import { Fragment } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, download, followBatch } from "../api";
import { ErrorNote, PageTitle, Progress, StatusBadge, Time, confirmAction, notify } from "../components";
import { fmtAgo, fmtBytes, fmtCost, fmtInt, fmtTime, isoTime } from "../format";
import { isFinal } from "../progress";
import { go, href } from "../router";
import { can } from "../session";
import type { Batch, FileRecord, Me } from "../types";
import { Speed, WAITING_WORDS } from "./Batches";
import { FailedLines } from "./BatchErrors";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ERRORS_PAGE = 50;

function useLiveBatch(id: string) {
  const [batch, setBatch] = useState<Batch | null>(null);
  const [error, setError] = useState<unknown>(null);
  const latest = useRef<Batch | null>(null);
  useEffect(() => {
    const ctrl = new AbortController();
    const set = (b: Batch) => {
      latest.current = b;
      setBatch(b);
    };
    (async () => {
      try {
        set(await api<Batch>(`/batches/${encodeURIComponent(id)}`, { signal: ctrl.signal }));
        setError(null);
      } catch (e) {
        if ((e as Error).name !== "AbortError") setError(e);
        return;
      }
      // Follow until final: the stream while it works; after three failed
      // tries in a row, a GET every 2 s instead.
      let failures = 0;
      while (!ctrl.signal.aborted && latest.current && !isFinal(latest.current)) {
        if (failures < 3) {
          try {
            await followBatch(id, set, ctrl.signal);
            failures = 0;
          } catch (e) {
            if (ctrl.signal.aborted) return;
            if (e instanceof ApiError && e.status === 404) return setError(e);
            failures++;
          }
          await sleep(failures ? 1000 : 250);
        } else {
          await sleep(2000);
          try {
            set(await api<Batch>(`/batches/${encodeURIComponent(id)}`, { signal: ctrl.signal }));
          } catch {
            /* try again */
          }
        }
      }
    })();
    return () => ctrl.abort();
  }, [id]);
  return { batch, setBatch: (b: Batch) => ((latest.current = b), setBatch(b)), error };
}

function useFile(id: string | null, allowed: boolean) {
  const [file, setFile] = useState<FileRecord | null>(null);
  useEffect(() => {
    setFile(null);
    if (!id || !allowed) return;
    api<FileRecord>(`/files/${encodeURIComponent(id)}`).then(setFile, () => setFile(null));
  }, [id, allowed]);
  return file;
}

function DownloadButton({ fileId, filename, label, small }: { fileId: string; filename: string; label: string; small?: boolean }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  return (
    <>
      <button
        type="button"
        class={small ? "secondary small" : "secondary"}
        disabled={busy}
        onClick={async () => {
          setBusy(true);
          setError(null);
          try {
            await download(fileId, filename);
          } catch (e) {
            setError(e);
          } finally {
            setBusy(false);
          }
        }}
      >
        {busy ? "Downloading…" : label}
      </button>
      <ErrorNote error={error} />
    </>
  );
}

const WAITING_TITLES: Record<string, string> = Object.fromEntries(Object.entries(WAITING_WORDS).map(([k, v]) => [k, v[0]!.toUpperCase() + v.slice(1)]));

/** Why a running batch is not moving (its status_details, docs/CONTRACT.md §18/§19), as a notice above its progress. */
function Waiting({ batch }: { batch: Batch }) {
  const d = batch.status_details;
  if (!d || isFinal(batch)) return null;
  return (
    <div class="note note-warn" role="status" aria-label="Why the batch waits">
      <p>
        <strong>{WAITING_TITLES[d.code] ?? d.code}:</strong> waiting: {d.message}
        {d.since ? (
          <span class="muted">
            {" "}
            (since <time dateTime={isoTime(d.since)}>{fmtTime(d.since)}</time>)
          </span>
        ) : null}
      </p>
    </div>
  );
}

export function BatchPage({ id, me }: { id: string; me: Me }) {
  const { batch: b, setBatch, error } = useLiveBatch(id);
  const [actionError, setActionError] = useState<unknown>(null);
  const [acting, setActing] = useState(false);
  const [errPage, setErrPage] = useState(0);
  const mayWrite = can(me, "batches:write");
  const mayRead = can(me, "files:read");
  const input = useFile(b?.input_file_id ?? null, mayRead);

  if (error && !b)
    return (
      <section>
        <PageTitle text="Batch" />
        <ErrorNote error={error instanceof ApiError && error.status === 404 ? new Error(`There is no batch ${id} in this project.`) : error} />
        <p>
          <a href={href.batches}>All batches</a>
        </p>
      </section>
    );
  if (!b) return <p class="loading">Loading batch…</p>;

  const { total, completed, failed } = b.request_counts;
  const cancellable = b.status === "validating" || b.status === "in_progress";
  const retryable = isFinal(b) && b.status !== "failed" && failed > 0;

  const act = async (what: () => Promise<void>) => {
    setActing(true);
    setActionError(null);
    try {
      await what();
    } catch (e) {
      setActionError(e);
    } finally {
      setActing(false);
    }
  };
  const cancel = () =>
    act(async () => {
      if (!(await confirmAction("Cancel this batch?", `${b.id} stops: lines not yet answered end as batch_cancelled in its error file.`, "Cancel batch"))) return;
      setBatch(await api<Batch>(`/batches/${encodeURIComponent(b.id)}/cancel`, { method: "POST" }));
      notify("Cancelling the batch.");
    });
  const retry = () =>
    act(async () => {
      const next = await api<Batch>(`/batches/${encodeURIComponent(b.id)}/retry`, { method: "POST" });
      notify(`Started ${next.id} with the ${fmtInt(failed)} failed lines.`);
      go(href.batch(next.id));
    });

  const times: [string, number | null][] = [
    ["Created", b.created_at],
    ["In progress", b.in_progress_at],
    ["Finalizing", b.finalizing_at],
    ["Completed", b.completed_at],
    ["Failed", b.failed_at],
    ["Cancelling", b.cancelling_at],
    ["Cancelled", b.cancelled_at],
    ["Expired", b.expired_at],
  ];
  const errors = b.errors?.data ?? [];
  const errSlice = errors.slice(errPage * ERRORS_PAGE, (errPage + 1) * ERRORS_PAGE);
  const meta = Object.entries(b.metadata ?? {});

  return (
    <section>
      <p class="crumbs">
        <a href={href.batches}>Batches</a> /
      </p>
      <div class="title-row start">
        <PageTitle text={`Batch ${b.id}`}>
          <span class="mono id">{b.id}</span>
        </PageTitle>
        <StatusBadge status={b.status} />
      </div>

      <div class="actions" role="group" aria-label="Batch actions">
        {mayWrite && cancellable && (
          <button type="button" class="danger" onClick={cancel} disabled={acting}>
            Cancel batch
          </button>
        )}
        {mayWrite && b.status === "cancelling" && (
          <button type="button" class="danger" disabled>
            Cancelling…
          </button>
        )}
        {mayWrite && retryable && (
          <button type="button" onClick={retry} disabled={acting}>
            Retry {fmtInt(failed)} failed {failed === 1 ? "line" : "lines"}
          </button>
        )}
        {mayRead && b.output_file_id && <DownloadButton fileId={b.output_file_id} filename={`${b.id}_output.jsonl`} label="Download output" />}
        {mayRead && b.error_file_id && <DownloadButton fileId={b.error_file_id} filename={`${b.id}_error.jsonl`} label="Download errors" />}
      </div>
      <ErrorNote error={actionError} />

      <div class="card">
        <h2>Progress</h2>
        <Waiting batch={b} />
        <Progress batch={b} label="Batch progress" />
        <dl class="facts">
          <div>
            <dt>Succeeded</dt>
            <dd>{fmtInt(completed)}</dd>
          </div>
          <div>
            <dt>Failed</dt>
            <dd>{fmtInt(failed)}</dd>
          </div>
          <div>
            <dt>Total</dt>
            <dd>{fmtInt(total)}</dd>
          </div>
          <div>
            <dt>Rate · ETA</dt>
            <dd>
              <Speed batch={b} />
            </dd>
          </div>
          {!isFinal(b) && (
            <div>
              <dt>Estimated completion</dt>
              <dd>
                {b.estimated_completion_at ? (
                  <time dateTime={isoTime(b.estimated_completion_at)} title={fmtTime(b.estimated_completion_at)}>
                    {fmtTime(b.estimated_completion_at)} <span class="muted">({fmtAgo(b.estimated_completion_at)})</span>
                  </time>
                ) : (
                  <span class="muted">not known yet</span>
                )}
              </dd>
            </div>
          )}
          <div>
            <dt>Cost</dt>
            <dd>
              {fmtCost(b.cost)}
              {b.cost && b.cost.discount ? <span class="muted"> ({Math.round(b.cost.discount * 100)}% batch discount)</span> : null}
            </dd>
          </div>
          <div>
            <dt>Tokens</dt>
            <dd>{b.usage ? `${fmtInt(b.usage.input_tokens)} in · ${fmtInt(b.usage.output_tokens)} out` : "—"}</dd>
          </div>
        </dl>
      </div>

      <div class="grid2">
        <div class="card">
          <h2>Details</h2>
          <dl class="pairs">
            <dt>Endpoint</dt>
            <dd class="mono">{b.endpoint}</dd>
            <dt>Model</dt>
            <dd>{b.model ?? "—"}</dd>
            <dt>Window</dt>
            <dd>{b.completion_window}</dd>
            <dt>Input file</dt>
            <dd>
              <span class="mono id">{b.input_file_id}</span>
              {input && (
                <>
                  {" "}
                  <span class="muted">
                    ({input.filename}, {fmtBytes(input.bytes)})
                  </span>{" "}
                  <DownloadButton fileId={input.id} filename={input.filename} label="Download input" small />
                </>
              )}
            </dd>
            <dt>Output file</dt>
            <dd class="mono id">{b.output_file_id ?? "—"}</dd>
            <dt>Error file</dt>
            <dd class="mono id">{b.error_file_id ?? "—"}</dd>
          </dl>
        </div>
        <div class="card">
          <h2>Timeline</h2>
          <dl class="pairs">
            {times
              .filter(([, t]) => t)
              .map(([label, t]) => (
                <Fragment key={label}>
                  <dt>{label}</dt>
                  <dd>
                    <Time s={t} />
                  </dd>
                </Fragment>
              ))}
            {!isFinal(b) && b.expires_at && (
              <>
                <dt>Expires</dt>
                <dd>
                  <Time s={b.expires_at} />
                </dd>
              </>
            )}
          </dl>
        </div>
      </div>

      {errors.length > 0 && (
        <div class="card">
          <h2>Errors</h2>
          <table class="list errors">
            <caption class="sr-only">Errors of the batch file, by line</caption>
            <thead>
              <tr>
                <th scope="col">Line</th>
                <th scope="col">Code</th>
                <th scope="col">Message</th>
              </tr>
            </thead>
            <tbody>
              {errSlice.map((e, i) => (
                <tr key={i}>
                  <td data-label="Line">{e.line ?? "—"}</td>
                  <td data-label="Code" class="mono">
                    {e.code}
                  </td>
                  <td data-label="Message">
                    <div>
                      {e.message}
                      {e.param && <span class="muted"> ({e.param})</span>}
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {errors.length > ERRORS_PAGE && (
            <nav class="pager" aria-label="Error pages">
              <button type="button" disabled={errPage === 0} onClick={() => setErrPage(errPage - 1)}>
                ← Previous
              </button>
              <span>
                {errPage * ERRORS_PAGE + 1}–{Math.min(errors.length, (errPage + 1) * ERRORS_PAGE)} of {errors.length}
              </span>
              <button type="button" disabled={(errPage + 1) * ERRORS_PAGE >= errors.length} onClick={() => setErrPage(errPage + 1)}>
                Next →
              </button>
            </nav>
          )}
        </div>
      )}

      <FailedLines key={b.id} batch={b} mayReadFiles={mayRead} />

      <div class="card">
        <h2>Metadata</h2>
        {meta.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <dl class="pairs">
            {meta.map(([k, v]) => (
              <Fragment key={k}>
                <dt class="mono">{k}</dt>
                <dd>{k === "retry_of" ? <a href={href.batch(v)}>{v}</a> : v}</dd>
              </Fragment>
            ))}
          </dl>
        )}
      </div>
    </section>
  );
}

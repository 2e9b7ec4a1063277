// The batch list: one page (PAGE_SIZE, newest first, cursor-paged by the
// API), refreshed while any batch on it runs. One GET refreshes every row
// of the page: following each running batch's event stream instead would
// hold one connection per row, and a browser opens at most six per server
// over HTTP/1.1 (the page would stall). The batch page follows its one
// batch's stream.
import { useEffect, useLayoutEffect, useState } from "preact/hooks";
import { ApiError, api } from "../api";
import { ErrorNote, PageTitle, Pager, Progress, StatusBadge, Time, markOnce, useCursors } from "../components";
import { fmtCost, fmtDuration, fmtRate } from "../format";
import { isFinal, speedOf } from "../progress";
import { href } from "../router";
import { can } from "../session";
import type { Batch, List, Me } from "../types";

export const PAGE_SIZE = 25;

/** Short words for a batch's status_details code (docs/CONTRACT.md §18), for the list; the batch's page gives its message. */
export const WAITING_WORDS: Record<string, string> = { upstream_down: "upstream down", rate_limited: "rate limited", peak_hours: "peak hours", queued: "queued" };

export function Speed({ batch }: { batch: Batch }) {
  const { rate, eta, took } = speedOf(batch);
  if (took !== null) return <span>took {fmtDuration(took)}</span>;
  const d = batch.status_details;
  // Why it waits, when the server says so (its message on hover).
  const waiting = d ? <span class="waiting" title={d.message}>waiting: {WAITING_WORDS[d.code] ?? d.code}</span> : null;
  if (rate === null) return waiting ?? <span class="muted">—</span>;
  return (
    <span>
      {fmtRate(rate)}
      {eta !== null && <span class="muted"> · {fmtDuration(eta)} left</span>}
      {waiting && <> · {waiting}</>}
    </span>
  );
}

export function BatchesPage({ me }: { me: Me }) {
  const cursors = useCursors();
  const [list, setList] = useState<List<Batch> | null>(null);
  const [busy, setBusy] = useState(true);
  const [error, setError] = useState<unknown>(null);
  useState(() => performance.mark("batches-start"));

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ctrl = new AbortController();
    const load = async () => {
      setBusy(true);
      let next = 5000;
      try {
        // Anthropic's message batches too (docs/CONTRACT.md §22), marked in their row.
        const q = `/batches?limit=${PAGE_SIZE}&include=message_batches${cursors.after ? `&after=${encodeURIComponent(cursors.after)}` : ""}`;
        const page = await api<List<Batch>>(q, { signal: ctrl.signal });
        if (stopped) return;
        setList(page);
        setError(null);
        const running = page.data.some((b) => !isFinal(b));
        // Running rows move every second; a page of finished ones changes only
        // when a batch is created (first page).
        next = running ? 1000 : cursors.after ? 0 : 5000;
      } catch (e) {
        if (stopped || (e as Error).name === "AbortError") return;
        if (e instanceof ApiError && e.code === "invalid_value" && cursors.after) cursors.reset(); // the cursor batch is gone
        setError(e);
      } finally {
        if (!stopped) setBusy(false);
      }
      if (next && !stopped) timer = setTimeout(load, document.hidden ? Math.max(next, 10_000) : next);
    };
    load();
    return () => {
      stopped = true;
      ctrl.abort();
      clearTimeout(timer);
    };
  }, [cursors.after]);

  // Before paint, right after the first page is in the DOM: how long the list took.
  useLayoutEffect(() => {
    if (list && performance.getEntriesByName("batches-rendered").length === 0) {
      markOnce("batches-rendered");
      performance.measure("batches-first-page", "batches-start", "batches-rendered");
    }
  }, [list]);

  const mayCreate = can(me, "files:write") && can(me, "batches:write");
  return (
    <section aria-busy={busy && !list}>
      <div class="title-row">
        <PageTitle text="Batches" />
        {mayCreate && (
          <a class="button" href={href.new}>
            New batch
          </a>
        )}
      </div>
      <ErrorNote error={error} />
      {list && list.data.length === 0 && cursors.page === 1 && (
        <p class="empty">
          No batches yet.{" "}
          {mayCreate ? <a href={href.new}>Start one from a JSONL file.</a> : "Batches started with the API or the CLI appear here."}
        </p>
      )}
      {list && list.data.length > 0 && (
        <table class="list">
          <caption class="sr-only">Batches, newest first (page {cursors.page})</caption>
          <thead>
            <tr>
              <th scope="col">Batch</th>
              <th scope="col">Status</th>
              <th scope="col">Progress</th>
              <th scope="col">Rate · ETA</th>
              <th scope="col">Cost</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {list.data.map((b) => (
              <tr key={b.id}>
                <td data-label="Batch">
                  <div>
                    <a href={href.batch(b.id)} class="mono id">
                      {b.id}
                    </a>
                    <div class="sub">
                      {b.endpoint.replace(/^\/v1\//, "")}
                      {b.model && ` · ${b.model}`}
                      {b.metadata?.description && ` · ${b.metadata.description}`}
                      {b.api === "anthropic" && (
                        <>
                          {" · "}
                          <span class="badge" title={`Anthropic message batch ${b.message_batch_id}`}>
                            Anthropic
                          </span>
                        </>
                      )}
                    </div>
                  </div>
                </td>
                <td data-label="Status">
                  <StatusBadge status={b.status} />
                </td>
                <td data-label="Progress">
                  <Progress batch={b} />
                </td>
                <td data-label="Rate · ETA">
                  <Speed batch={b} />
                </td>
                <td data-label="Cost">{fmtCost(b.cost)}</td>
                <td data-label="Created">
                  <Time s={b.created_at} relative />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {list && (
        <Pager
          page={cursors.page}
          hasMore={!!list.has_more}
          busy={busy}
          onNewer={cursors.newer}
          onOlder={() => cursors.older(list.last_id)}
        />
      )}
    </section>
  );
}

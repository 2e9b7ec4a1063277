// Small pieces every page uses.
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";
import { fmtAgo, fmtTime, isoTime } from "./format";
import { navigated } from "./router";
import type { Batch } from "./types";

/** The page's heading; focused after a navigation so screen readers announce the new page. */
export function PageTitle({ children, text }: { children?: ComponentChildren; text: string }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${text} · offpeak`;
    if (navigated) ref.current?.focus();
  }, [text]);
  return (
    <h1 ref={ref} tabIndex={-1}>
      {children ?? text}
    </h1>
  );
}

/** Done/total with failed lines in their own colour; role progressbar with its value. */
export function Progress({ batch, label }: { batch: Batch; label?: string }) {
  const { total, completed, failed } = batch.request_counts;
  const done = completed + failed;
  const known = total > 0;
  const pct = (n: number) => `${known ? Math.min(100, (n / total) * 100) : 0}%`;
  const text = known ? `${done.toLocaleString()} of ${total.toLocaleString()} done${failed ? `, ${failed.toLocaleString()} failed` : ""}` : batch.status === "validating" ? "validating" : "no requests";
  return (
    <div class="progress-wrap">
      <div
        class="progress"
        role="progressbar"
        aria-label={label ?? `Progress of ${batch.id}`}
        aria-valuemin={0}
        aria-valuemax={known ? total : undefined}
        aria-valuenow={known ? done : undefined}
        aria-valuetext={text}
      >
        <span class="ok" style={{ width: pct(completed) }} />
        <span class="bad" style={{ width: pct(failed) }} />
      </div>
      <span class="progress-text">
        {known ? `${done.toLocaleString()}/${total.toLocaleString()}` : "—"}
        {failed > 0 && <span class="failed-count"> · {failed.toLocaleString()} failed</span>}
      </span>
    </div>
  );
}

/** A progress bar in percent (uploads). */
export function PercentBar({ value, max, label }: { value: number; max: number; label: string }) {
  const pct = max > 0 ? Math.min(100, Math.round((value / max) * 100)) : 0;
  return (
    <div class="progress-wrap">
      <div class="progress" role="progressbar" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct} aria-valuetext={`${pct}%`}>
        <span class="ok" style={{ width: `${pct}%` }} />
      </div>
      <span class="progress-text">{pct}%</span>
    </div>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status}`}>{status.replace("_", " ")}</span>;
}

export function Time({ s, relative }: { s: number | null | undefined; relative?: boolean }) {
  if (!s) return <span>—</span>;
  return (
    <time dateTime={isoTime(s)} title={fmtTime(s)}>
      {relative ? fmtAgo(s) : fmtTime(s)}
    </time>
  );
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const msg = error instanceof Error ? error.message : String(error);
  return (
    <p class="note note-error" role="alert">
      {error instanceof ApiError && error.status === 403 ? `Not allowed with this key: ${msg}` : msg}
    </p>
  );
}

/** Newer/Older buttons over a cursor-paged list (the API pages with `after`). */
export function Pager({ page, hasMore, onNewer, onOlder, busy }: { page: number; hasMore: boolean; onNewer(): void; onOlder(): void; busy?: boolean }) {
  if (page === 1 && !hasMore) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" onClick={onNewer} disabled={page === 1 || busy}>
        ← Newer
      </button>
      <span aria-live="polite">Page {page}</span>
      <button type="button" onClick={onOlder} disabled={!hasMore || busy}>
        Older →
      </button>
    </nav>
  );
}

/** Cursor stack for Pager: `after` of the current page, and how to move. */
export function useCursors() {
  const [stack, setStack] = useState<string[]>([]);
  return {
    after: stack[stack.length - 1],
    page: stack.length + 1,
    older: (lastId: string | null | undefined) => lastId && setStack((s) => [...s, lastId]),
    newer: () => setStack((s) => s.slice(0, -1)),
    reset: () => setStack([]),
  };
}

/** A secret shown once (a new key, a webhook signing secret), with a copy button. */
export function SecretOnce({ label, secret, onDone }: { label: string; secret: string; onDone(): void }) {
  const [copied, setCopied] = useState(false);
  const ref = useRef<HTMLInputElement>(null);
  useEffect(() => ref.current?.select(), []);
  return (
    <div class="secret" role="status">
      <p>
        <strong>Copy it now: it is shown only once.</strong>
      </p>
      <label>
        {label}
        <input ref={ref} readOnly value={secret} class="mono" onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
      </label>
      <div class="actions">
        <button
          type="button"
          onClick={async () => {
            try {
              await navigator.clipboard.writeText(secret);
              setCopied(true);
            } catch {
              ref.current?.select();
            }
          }}
        >
          {copied ? "Copied" : "Copy"}
        </button>
        <button type="button" class="secondary" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

// ── confirmation dialog and notices ─────────────────────────────────────

interface Ask {
  title: string;
  body: string;
  confirm: string;
  resolve(ok: boolean): void;
}

let showAsk: ((a: Ask) => void) | null = null;
let showNotice: ((msg: string) => void) | null = null;

/** Asks in a modal <dialog>; resolves true when the person confirms. */
export function confirmAction(title: string, body: string, confirm: string): Promise<boolean> {
  return new Promise((resolve) => (showAsk ? showAsk({ title, body, confirm, resolve }) : resolve(window.confirm(`${title}\n\n${body}`))));
}

/** A short message in the live region ("Batch cancelled."). */
export function notify(msg: string) {
  showNotice?.(msg);
}

export function Overlays() {
  const [ask, setAsk] = useState<Ask | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  useEffect(() => {
    showAsk = setAsk;
    showNotice = (m) => {
      setNotice(m);
      clearTimeout(timer.current);
      timer.current = setTimeout(() => setNotice(null), 5000);
    };
    return () => {
      showAsk = null;
      showNotice = null;
    };
  }, []);
  useEffect(() => {
    if (ask && dialog.current && !dialog.current.open) dialog.current.showModal();
  }, [ask]);
  const close = (ok: boolean) => {
    ask?.resolve(ok);
    setAsk(null);
    dialog.current?.close();
  };
  // A page change (a link, the back button) closes the dialog as "Keep": it
  // asked about the page that is gone, and must not stay over the next one.
  const current = useRef<Ask | null>(null);
  current.current = ask;
  useEffect(() => {
    const onNavigate = () => {
      const open = current.current;
      if (!open) return;
      current.current = null;
      open.resolve(false);
      setAsk(null);
      dialog.current?.close();
    };
    addEventListener("hashchange", onNavigate);
    return () => removeEventListener("hashchange", onNavigate);
  }, []);
  return (
    <>
      <dialog ref={dialog} aria-labelledby="dialog-title" aria-describedby="dialog-body" onCancel={() => close(false)}>
        {ask && (
          <form method="dialog" onSubmit={(e) => (e.preventDefault(), close(true))}>
            <h2 id="dialog-title">{ask.title}</h2>
            <p id="dialog-body">{ask.body}</p>
            <div class="actions">
              <button type="button" class="secondary" onClick={() => close(false)}>
                Keep
              </button>
              <button type="submit" class="danger">
                {ask.confirm}
              </button>
            </div>
          </form>
        )}
      </dialog>
      <div class="toast" role="status" aria-live="polite">
        {notice}
      </div>
    </>
  );
}

/** Marks a moment for the Performance API (first one wins). */
export function markOnce(name: string) {
  if (performance.getEntriesByName(name, "mark").length === 0) performance.mark(name);
}

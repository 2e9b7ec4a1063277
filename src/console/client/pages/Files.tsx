// Files: a page at a time (cursor-paged, newest first), download, delete.
import { useEffect, useState } from "preact/hooks";
import { ApiError, api, download, request } from "../api";
import { ErrorNote, PageTitle, Pager, Time, confirmAction, notify, useCursors } from "../components";
import { fmtBytes } from "../format";
import { can } from "../session";
import type { FileRecord, List, Me } from "../types";

const PAGE_SIZE = 25;
const PURPOSES = ["batch", "batch_output", "user_data", "fine-tune", "assistants", "vision", "evals"];

export function FilesPage({ me }: { me: Me }) {
  const cursors = useCursors();
  const [purpose, setPurpose] = useState("");
  const [list, setList] = useState<List<FileRecord> | null>(null);
  const [busy, setBusy] = useState(true);
  const [error, setError] = useState<unknown>(null);
  const [reload, setReload] = useState(0);
  const [working, setWorking] = useState<string | null>(null);
  const mayDelete = can(me, "files:write");

  useEffect(() => {
    const ctrl = new AbortController();
    setBusy(true);
    const q = new URLSearchParams({ limit: String(PAGE_SIZE), order: "desc" });
    if (purpose) q.set("purpose", purpose);
    if (cursors.after) q.set("after", cursors.after);
    api<List<FileRecord>>(`/files?${q}`, { signal: ctrl.signal }).then(
      (l) => {
        setList(l);
        setError(null);
        setBusy(false);
      },
      (e) => {
        if ((e as Error).name === "AbortError") return;
        if (e instanceof ApiError && e.param === "after") cursors.reset();
        setError(e);
        setBusy(false);
      },
    );
    return () => ctrl.abort();
  }, [cursors.after, purpose, reload]);

  const remove = async (f: FileRecord) => {
    if (!(await confirmAction(`Delete ${f.filename}?`, `${f.id} (${fmtBytes(f.bytes)}) and its bytes are removed for good.`, "Delete file"))) return;
    setWorking(f.id);
    setError(null);
    try {
      await request(`/files/${encodeURIComponent(f.id)}`, { method: "DELETE" });
      notify(`Deleted ${f.filename}.`);
      // The deleted file may be the cursor of the next page: start again.
      if (list && list.data.length === 1) cursors.reset();
      setReload((n) => n + 1);
    } catch (e) {
      setError(e);
    } finally {
      setWorking(null);
    }
  };

  const save = async (f: FileRecord) => {
    setWorking(f.id);
    setError(null);
    try {
      await download(f.id, f.filename);
    } catch (e) {
      setError(e);
    } finally {
      setWorking(null);
    }
  };

  return (
    <section aria-busy={busy && !list}>
      <div class="title-row">
        <PageTitle text="Files" />
        <label class="inline">
          Purpose
          <select
            value={purpose}
            onChange={(e) => {
              cursors.reset();
              setPurpose((e.currentTarget as HTMLSelectElement).value);
            }}
          >
            <option value="">All</option>
            {PURPOSES.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </label>
      </div>
      <ErrorNote error={error} />
      {list && list.data.length === 0 && cursors.page === 1 && <p class="empty">No files{purpose ? ` with purpose ${purpose}` : ""}.</p>}
      {list && list.data.length > 0 && (
        <table class="list">
          <caption class="sr-only">Files, newest first (page {cursors.page})</caption>
          <thead>
            <tr>
              <th scope="col">File</th>
              <th scope="col">Purpose</th>
              <th scope="col">Size</th>
              <th scope="col">Created</th>
              <th scope="col">Expires</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.map((f) => (
              <tr key={f.id}>
                <td data-label="File">
                  <div>
                    <span class="filename">{f.filename}</span>
                    <div class="sub mono id">{f.id}</div>
                  </div>
                </td>
                <td data-label="Purpose">{f.purpose}</td>
                <td data-label="Size">{fmtBytes(f.bytes)}</td>
                <td data-label="Created">
                  <Time s={f.created_at} relative />
                </td>
                <td data-label="Expires">{f.expires_at ? <Time s={f.expires_at} relative /> : "never"}</td>
                <td class="row-actions">
                  <button type="button" class="secondary small" disabled={working === f.id} onClick={() => save(f)} aria-label={`Download ${f.filename}`}>
                    Download
                  </button>
                  {mayDelete && (
                    <button type="button" class="danger small" disabled={working === f.id} onClick={() => remove(f)} aria-label={`Delete ${f.filename}`}>
                      Delete
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {list && <Pager page={cursors.page} hasMore={!!list.has_more} busy={busy} onNewer={cursors.newer} onOlder={() => cursors.older(list.last_id)} />}
    </section>
  );
}

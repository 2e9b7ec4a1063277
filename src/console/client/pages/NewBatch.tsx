// New batch: pick or drop a JSONL file; it uploads at once (the server checks
// every line while it streams in, so a bad line is named before anything
// else is chosen); then endpoint and window, and start.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, request, upload } from "../api";
import { ErrorNote, PageTitle, PercentBar } from "../components";
import { fmtBytes } from "../format";
import { go, href } from "../router";
import type { Batch, FileRecord } from "../types";

export const ENDPOINTS = ["/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/completions"];
/** completion_window choices (docs/CONTRACT.md §18: Nh or Nd from 1h to 7d; 24h is the default, and what OpenAI's SDKs send). */
export const WINDOWS = ["1h", "4h", "12h", "24h", "48h", "72h", "7d"];

/** The `url` of the file's first request, to preselect the endpoint (reads at most 1 MB). */
async function firstUrl(file: File): Promise<string | null> {
  try {
    const head = await file.slice(0, 1 << 20).text();
    for (const line of head.replace(/^\uFEFF/, "").split("\n")) {
      if (!line.trim()) continue;
      const url = (JSON.parse(line) as { url?: unknown }).url;
      return typeof url === "string" ? url.replace(/^\/api\/v1\//, "/v1/") : null;
    }
  } catch {
    /* the upload names the problem */
  }
  return null;
}

/** "Invalid batch file: line 3, column 17: not valid JSON: …" → **Line 3, column 17**: not valid JSON: … */
function LineError({ error, name }: { error: unknown; name: string }) {
  const msg = error instanceof Error ? error.message : String(error);
  const m = /^(?:invalid batch file:\s*)?(line \d+(?:, column \d+)?)(:?)\s*([\s\S]*)$/i.exec(msg);
  if (!m)
    return (
      <p>
        <strong>{name}</strong>: {msg}
      </p>
    );
  return (
    <p>
      <strong>{m[1]![0]!.toUpperCase() + m[1]!.slice(1)}</strong>
      {m[2] ? ": " : " "}
      {m[3]}
    </p>
  );
}

type Upload =
  | { phase: "idle" }
  | { phase: "uploading"; name: string; sent: number; total: number }
  | { phase: "uploaded"; file: FileRecord }
  | { phase: "failed"; name: string; error: unknown };

export function NewBatchPage() {
  const [up, setUp] = useState<Upload>({ phase: "idle" });
  const [endpoint, setEndpoint] = useState(ENDPOINTS[0]!);
  const [window_, setWindow] = useState("24h");
  const [description, setDescription] = useState("");
  const [dragging, setDragging] = useState(false);
  const [starting, setStarting] = useState(false);
  const [startError, setStartError] = useState<unknown>(null);
  const current = useRef<{ abort(): void } | null>(null);
  /** An uploaded file not (yet) used by a batch: removed if another one replaces it. */
  const unused = useRef<string | null>(null);
  const input = useRef<HTMLInputElement>(null);

  useEffect(() => () => current.current?.abort(), []);

  const choose = async (file: File | undefined) => {
    if (!file) return;
    current.current?.abort();
    if (unused.current) request(`/files/${unused.current}`, { method: "DELETE" }).catch(() => {});
    unused.current = null;
    setStartError(null);
    const url = await firstUrl(file);
    if (url && ENDPOINTS.includes(url)) setEndpoint(url);
    setUp({ phase: "uploading", name: file.name, sent: 0, total: file.size });
    const u = upload(file, "batch", (sent, total) => setUp({ phase: "uploading", name: file.name, sent, total }));
    current.current = u;
    try {
      const rec = (await u.done) as FileRecord;
      unused.current = rec.id;
      setUp({ phase: "uploaded", file: rec });
    } catch (e) {
      if ((e as Error).name === "AbortError") return;
      setUp({ phase: "failed", name: file.name, error: e });
    } finally {
      if (current.current === u) current.current = null;
    }
  };

  const start = async (e: Event) => {
    e.preventDefault();
    if (up.phase !== "uploaded") return;
    setStarting(true);
    setStartError(null);
    try {
      const body: Record<string, unknown> = { input_file_id: up.file.id, endpoint, completion_window: window_ };
      if (description.trim()) body.metadata = { description: description.trim() };
      const b = await api<Batch>("/batches", { method: "POST", body });
      unused.current = null;
      go(href.batch(b.id));
    } catch (err) {
      setStartError(err);
      setStarting(false);
    }
  };

  const failure = up.phase === "failed" ? up.error : null;
  const line = failure instanceof ApiError ? failure.line : null;
  return (
    <section>
      <PageTitle text="New batch" />
      <form onSubmit={start} class="card new-batch">
        <div
          class={`drop${dragging ? " dragging" : ""}`}
          onDragOver={(e) => {
            e.preventDefault();
            setDragging(true);
          }}
          onDragLeave={() => setDragging(false)}
          onDrop={(e) => {
            e.preventDefault();
            setDragging(false);
            choose(e.dataTransfer?.files[0]);
          }}
        >
          <label for="batch-file">JSONL file</label>
          <p class="hint" id="batch-file-help">
            Drop it here or choose it: one request per line, as for OpenAI's Batch API. It is checked line by line while it uploads.
          </p>
          <input
            ref={input}
            id="batch-file"
            type="file"
            accept=".jsonl,.json,.txt,application/jsonl,application/x-ndjson,text/plain"
            aria-describedby="batch-file-help"
            onChange={(e) => {
              const f = (e.currentTarget as HTMLInputElement).files?.[0];
              choose(f);
            }}
          />
        </div>

        {up.phase === "uploading" && (
          <div class="upload-state">
            <p>
              Uploading <strong>{up.name}</strong> ({fmtBytes(up.sent)} of {fmtBytes(up.total)})
            </p>
            <PercentBar value={up.sent} max={up.total} label="Upload progress" />
            <p class="hint">Every line is checked as it arrives; the answer comes once the last byte is in.</p>
          </div>
        )}
        {up.phase === "uploaded" && (
          <p class="note note-ok" role="status">
            Uploaded <strong>{up.file.filename}</strong> ({fmtBytes(up.file.bytes)}) as <span class="mono">{up.file.id}</span>: every line is valid.
          </p>
        )}
        {up.phase === "failed" && (
          <div class="note note-error" role="alert">
            <LineError error={failure} name={up.name} />
            {line !== null && (
              <p class="hint">
                {up.name} was not stored. Fix line {line} and choose the file again.
              </p>
            )}
          </div>
        )}

        <div class="fields">
          <label>
            Endpoint
            <select value={endpoint} onChange={(e) => setEndpoint((e.currentTarget as HTMLSelectElement).value)}>
              {ENDPOINTS.map((x) => (
                <option key={x} value={x}>
                  {x}
                </option>
              ))}
            </select>
          </label>
          <label>
            Completion window
            <select value={window_} onChange={(e) => setWindow((e.currentTarget as HTMLSelectElement).value)}>
              {WINDOWS.map((x) => (
                <option key={x} value={x}>
                  {x}
                </option>
              ))}
            </select>
          </label>
          <label>
            <span>
              Description <span class="muted">(optional)</span>
            </span>
            <input type="text" maxLength={512} value={description} onInput={(e) => setDescription((e.currentTarget as HTMLInputElement).value)} />
          </label>
        </div>
        <ErrorNote error={startError} />
        <div class="actions">
          <button type="submit" disabled={up.phase !== "uploaded" || starting}>
            {starting ? "Starting…" : "Start batch"}
          </button>
        </div>
      </form>
    </section>
  );
}

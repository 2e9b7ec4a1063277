// Webhook endpoints (admin, docs/CONTRACT.md §12): create (the signing secret is shown
// once), list every project's, delete, and see each one's delivery attempts.
import { useEffect, useState } from "preact/hooks";
import { api, request } from "../api";
import { ErrorNote, PageTitle, SecretOnce, Time, confirmAction, notify } from "../components";
import type { Delivery, List, Me, WebhookEndpoint } from "../types";
import { LocalPager, pageOf } from "./Keys";

const EVENTS = ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"];

function CreateEndpoint({ me, onCreated }: { me: Me; onCreated(w: WebhookEndpoint): void }) {
  const [url, setUrl] = useState("");
  const [project, setProject] = useState(me.project);
  const [events, setEvents] = useState<string[]>(EVENTS);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const w = await api<WebhookEndpoint>("/webhook_endpoints", { method: "POST", body: { url: url.trim(), events, project: project.trim() || undefined } });
      setUrl("");
      onCreated(w);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card" onSubmit={submit}>
      <h2>New endpoint</h2>
      <div class="fields">
        <label class="wide">
          URL
          <input type="url" required placeholder="https://hooks.example.com/offpeak" value={url} onInput={(e) => setUrl((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <label>
          Project
          <input type="text" value={project} onInput={(e) => setProject((e.currentTarget as HTMLInputElement).value)} />
        </label>
      </div>
      <fieldset class="checks">
        <legend>Events</legend>
        {EVENTS.map((ev) => (
          <label key={ev} class="check">
            <input
              type="checkbox"
              checked={events.includes(ev)}
              onChange={(e) => {
                const on = (e.currentTarget as HTMLInputElement).checked;
                setEvents((cur) => (on ? [...cur, ev] : cur.filter((x) => x !== ev)));
              }}
            />
            {ev}
          </label>
        ))}
      </fieldset>
      <ErrorNote error={error} />
      <div class="actions">
        <button type="submit" disabled={busy || events.length === 0}>
          Add endpoint
        </button>
      </div>
    </form>
  );
}

function Deliveries({ id }: { id: string }) {
  const [list, setList] = useState<Delivery[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    api<List<Delivery>>(`/webhook_endpoints/${encodeURIComponent(id)}/deliveries?limit=20`).then(
      (l) => setList(l.data),
      setError,
    );
  }, [id]);
  if (error) return <ErrorNote error={error} />;
  if (!list) return <p class="loading">Loading…</p>;
  if (list.length === 0) return <p class="muted">No deliveries yet.</p>;
  return (
    <table class="list compact">
      <caption>Latest delivery attempts</caption>
      <thead>
        <tr>
          <th scope="col">Event</th>
          <th scope="col">Attempt</th>
          <th scope="col">Answer</th>
          <th scope="col">When</th>
        </tr>
      </thead>
      <tbody>
        {list.map((d) => (
          <tr key={`${d.event_id}-${d.attempt}`}>
            <td data-label="Event">
              <div>
                {d.type}
                <div class="sub mono id">{d.event_id}</div>
              </div>
            </td>
            <td data-label="Attempt">{d.attempt}</td>
            <td data-label="Answer">
              <div>
                {d.status_code !== null ? (
                  <span class={`badge ${d.status_code < 300 ? "badge-completed" : "badge-failed"}`}>{d.status_code}</span>
                ) : (
                  <span class="badge badge-failed">no answer</span>
                )}
                {d.error && <span class="muted"> {d.error}</span>}
              </div>
            </td>
            <td data-label="When">
              <Time s={d.created_at} relative />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function WebhooksPage({ me }: { me: Me }) {
  const [list, setList] = useState<WebhookEndpoint[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [created, setCreated] = useState<WebhookEndpoint | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [page, setPage] = useState(0);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    api<List<WebhookEndpoint>>("/webhook_endpoints").then(
      (l) => (setList(l.data), setError(null)),
      setError,
    );
  }, [reload]);

  const remove = async (w: WebhookEndpoint) => {
    if (!(await confirmAction("Delete this endpoint?", `${w.url} gets no more events; undelivered ones are dropped.`, "Delete endpoint"))) return;
    try {
      await request(`/webhook_endpoints/${encodeURIComponent(w.id)}`, { method: "DELETE" });
      notify("Endpoint deleted.");
      setReload((n) => n + 1);
    } catch (e) {
      setError(e);
    }
  };

  return (
    <section>
      <PageTitle text="Webhooks" />
      <p class="muted">offpeak POSTs an event to these URLs when a batch of their project ends, signed as OpenAI signs its webhooks.</p>
      {created?.secret && <SecretOnce label={`Signing secret of ${created.url}`} secret={created.secret} onDone={() => setCreated(null)} />}
      <CreateEndpoint
        me={me}
        onCreated={(w) => {
          setCreated(w);
          setReload((n) => n + 1);
        }}
      />
      <ErrorNote error={error} />
      {list && (
        <>
          <h2>Endpoints</h2>
          {list.length === 0 ? (
            <p class="muted">No endpoints yet.</p>
          ) : (
            <ul class="endpoints">
              {pageOf(list, page).map((w) => (
                <li key={w.id} class="card">
                  <div class="title-row">
                    <div>
                      <div class="mono url">{w.url}</div>
                      <div class="sub">
                        {w.project} · {w.events.join(", ")} · added <Time s={w.created_at} relative />
                      </div>
                    </div>
                    <div class="actions">
                      <button type="button" class="secondary small" aria-expanded={open === w.id} onClick={() => setOpen(open === w.id ? null : w.id)}>
                        Deliveries
                      </button>
                      <button type="button" class="danger small" onClick={() => remove(w)} aria-label={`Delete ${w.url}`}>
                        Delete
                      </button>
                    </div>
                  </div>
                  {open === w.id && <Deliveries id={w.id} />}
                </li>
              ))}
            </ul>
          )}
          <LocalPager page={page} count={list.length} onPage={setPage} />
        </>
      )}
    </section>
  );
}

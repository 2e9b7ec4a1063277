// API keys (admin): create (the secret is shown once), list, revoke. The
// OFFPEAK_ADMIN_KEY key is listed too (source "env"), but it lives in the
// server's environment: it is retired there, not revoked here.
import { useEffect, useState } from "preact/hooks";
import { api, request } from "../api";
import { ErrorNote, PageTitle, SecretOnce, Time, confirmAction, notify } from "../components";
import type { ApiKey, List, Me } from "../types";

export const SCOPES = ["files:read", "files:write", "batches:read", "batches:write", "inference", "admin"];
const DEFAULT_SCOPES = SCOPES.filter((s) => s !== "admin");
const PAGE_SIZE = 50;

/** A page of a list the API returns whole (keys, webhook endpoints): few, but never drawn all at once. */
export function LocalPager({ page, count, onPage }: { page: number; count: number; onPage(p: number): void }) {
  if (count <= PAGE_SIZE) return null;
  const last = Math.ceil(count / PAGE_SIZE) - 1;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={page === 0} onClick={() => onPage(page - 1)}>
        ← Previous
      </button>
      <span>
        {page * PAGE_SIZE + 1}–{Math.min(count, (page + 1) * PAGE_SIZE)} of {count}
      </span>
      <button type="button" disabled={page >= last} onClick={() => onPage(page + 1)}>
        Next →
      </button>
    </nav>
  );
}
export const pageOf = <T,>(items: T[], page: number) => items.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);

function CreateKey({ me, onCreated }: { me: Me; onCreated(k: ApiKey): void }) {
  const [name, setName] = useState("");
  const [project, setProject] = useState(me.project);
  const [scopes, setScopes] = useState<string[]>(DEFAULT_SCOPES);
  const [rpm, setRpm] = useState("");
  const [tpm, setTpm] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const rate_limits = { rpm: rpm ? Number(rpm) : null, tpm: tpm ? Number(tpm) : null };
      const k = await api<ApiKey>("/keys", { method: "POST", body: { name: name.trim(), project: project.trim() || null, scopes, rate_limits } });
      setName("");
      onCreated(k);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const toggle = (s: string, on: boolean) => setScopes((cur) => (on ? [...cur, s] : cur.filter((x) => x !== s)));
  return (
    <form class="card" onSubmit={submit}>
      <h2>New key</h2>
      <div class="fields">
        <label>
          Name
          <input type="text" required maxLength={200} value={name} onInput={(e) => setName((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <label>
          Project
          <input type="text" value={project} onInput={(e) => setProject((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <label>
          <span>
            Requests per minute <span class="muted">(optional)</span>
          </span>
          <input type="number" min={1} step={1} inputMode="numeric" value={rpm} onInput={(e) => setRpm((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <label>
          <span>
            Tokens per minute <span class="muted">(optional)</span>
          </span>
          <input type="number" min={1} step={1} inputMode="numeric" value={tpm} onInput={(e) => setTpm((e.currentTarget as HTMLInputElement).value)} />
        </label>
      </div>
      <fieldset class="checks">
        <legend>Scopes</legend>
        {SCOPES.map((s) => (
          <label key={s} class="check">
            <input type="checkbox" checked={scopes.includes(s)} onChange={(e) => toggle(s, (e.currentTarget as HTMLInputElement).checked)} />
            {s}
          </label>
        ))}
      </fieldset>
      <ErrorNote error={error} />
      <div class="actions">
        <button type="submit" disabled={busy || scopes.length === 0}>
          Create key
        </button>
      </div>
    </form>
  );
}

export function KeysPage({ me }: { me: Me }) {
  const [keys, setKeys] = useState<ApiKey[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [created, setCreated] = useState<ApiKey | null>(null);
  const [page, setPage] = useState(0);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    api<List<ApiKey>>("/keys").then(
      (l) => (setKeys(l.data), setError(null)),
      (e) => setError(e),
    );
  }, [reload]);

  const revoke = async (k: ApiKey) => {
    const self = k.id === me.id;
    if (!(await confirmAction(`Revoke ${k.name}?`, `${k.id} stops working at once.${self ? " It is the key you are signed in with." : ""}`, "Revoke key"))) return;
    try {
      await request(`/keys/${encodeURIComponent(k.id)}`, { method: "DELETE" });
      notify(`Revoked ${k.name}.`);
      setReload((n) => n + 1);
    } catch (e) {
      setError(e);
    }
  };

  return (
    <section>
      <PageTitle text="API keys" />
      {created?.key && (
        <SecretOnce
          label={`Secret of ${created.name} (${created.id})`}
          secret={created.key}
          onDone={() => setCreated(null)}
        />
      )}
      <CreateKey
        me={me}
        onCreated={(k) => {
          setCreated(k);
          setReload((n) => n + 1);
        }}
      />
      <ErrorNote error={error} />
      {keys && (
        <>
          <h2>Keys</h2>
          {keys.length === 0 ? (
            <p class="muted">No keys yet.</p>
          ) : (
            <table class="list">
              <caption class="sr-only">API keys</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Project</th>
                  <th scope="col">Scopes</th>
                  <th scope="col">Limits</th>
                  <th scope="col">Created</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {pageOf(keys, page).map((k) => (
                  <tr key={k.id}>
                    <td data-label="Name">
                      <div>
                        {k.name}
                        {k.id === me.id && <span class="muted"> (this key)</span>}
                        <div class="sub mono id">{k.id}</div>
                        {k.source === "env" && <div class="sub">from the server's environment</div>}
                      </div>
                    </td>
                    <td data-label="Project">{k.project}</td>
                    <td data-label="Scopes">{k.scopes.join(", ")}</td>
                    <td data-label="Limits">
                      {k.rate_limits.rpm || k.rate_limits.tpm
                        ? [k.rate_limits.rpm && `${k.rate_limits.rpm.toLocaleString()} rpm`, k.rate_limits.tpm && `${k.rate_limits.tpm.toLocaleString()} tpm`].filter(Boolean).join(" · ")
                        : "default"}
                    </td>
                    <td data-label="Created">
                      <Time s={k.created_at} relative />
                    </td>
                    <td class="row-actions">
                      {k.source === "env" ? (
                        <span class="muted" title="Unset or change OFFPEAK_ADMIN_KEY and restart the server to retire it">
                          Set by OFFPEAK_ADMIN_KEY
                        </span>
                      ) : (
                        <button type="button" class="danger small" onClick={() => revoke(k)} aria-label={`Revoke ${k.name} (${k.id})`}>
                          Revoke
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <LocalPager page={page} count={keys.length} onPage={setPage} />
        </>
      )}
    </section>
  );
}

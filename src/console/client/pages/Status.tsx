// Status and models (GET /status needs only a valid key): overall health,
// upstreams, and each model's health and load; for admin keys also each
// upstream's replicas (GET /upstreams, ./Replicas.tsx). Refreshed every 5 s.
import { useEffect, useState } from "preact/hooks";
import { ApiError, api } from "../api";
import { ErrorNote, PageTitle, Time } from "../components";
import { fmtBytes, fmtDuration, fmtInt } from "../format";
import { can } from "../session";
import type { Me, Status, Upstream } from "../types";
import { ReplicaTables, withReading, type History } from "./Replicas";

const Health = ({ ok, up = "healthy", down = "unhealthy" }: { ok: boolean; up?: string; down?: string }) => (
  <span class={`badge ${ok ? "badge-completed" : "badge-failed"}`}>{ok ? up : down}</span>
);

/** GET /upstreams, or null when this key may not (403: not admin) or it failed this time (the last reading stays). */
async function upstreamsOrNull(onRefused: () => void): Promise<Upstream[] | null> {
  try {
    return (await api<{ data: Upstream[] }>("/upstreams")).data;
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) onRefused();
    return null;
  }
}

export function StatusPage({ me }: { me?: Me }) {
  const [s, setS] = useState<Status | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [replicas, setReplicas] = useState<{ upstreams: Upstream[]; history: History } | null>(null);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout>;
    let stopped = false;
    // Only admin keys may list the replicas; a narrower key's page never asks (and stops asking if refused).
    let mayList = !me || can(me, "admin");
    const load = async () => {
      try {
        const [next, ups] = await Promise.all([api<Status>("/status"), mayList ? upstreamsOrNull(() => (mayList = false)) : null]);
        if (stopped) return;
        setS(next);
        setError(null);
        if (ups) setReplicas((prev) => ({ upstreams: ups, history: withReading(prev?.history ?? new Map(), ups) }));
        else if (!mayList) setReplicas(null);
      } catch (e) {
        if (!stopped) setError(e);
      }
      if (!stopped) timer = setTimeout(load, 5000);
    };
    load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, []);
  return (
    <section>
      <div class="title-row">
        <PageTitle text="Status" />
        {s && <Health ok={s.status === "ok"} up="ok" down="degraded" />}
      </div>
      <ErrorNote error={error} />
      {!s && !error && <p class="loading">Loading…</p>}
      {s && (
        <>
          <dl class="facts card">
            <div>
              <dt>Version</dt>
              <dd>{s.version}</dd>
            </div>
            <div>
              <dt>Up for</dt>
              <dd>{fmtDuration(s.uptime_s)}</dd>
            </div>
            <div>
              <dt>Database</dt>
              <dd>
                <Health ok={s.database.ok} up="ok" down="failing" />
              </dd>
            </div>
            <div>
              <dt>Storage</dt>
              <dd>
                <Health ok={s.storage.ok} up="ok" down="failing" /> <span class="muted">{fmtBytes(s.storage.free_bytes)} free</span>
              </dd>
            </div>
            <div>
              <dt>Batches running</dt>
              <dd>
                {fmtInt(s.batches.in_progress)} <span class="muted">· {fmtInt(s.batches.validating)} validating · {fmtInt(s.batches.finalizing)} finalizing</span>
              </dd>
            </div>
          </dl>

          <h2>Upstreams</h2>
          {!s.upstreams || s.upstreams.length === 0 ? (
            <p class="muted">None configured: requests run on the built-in models.</p>
          ) : (
            <table class="list">
              <caption class="sr-only">Upstream engines and their health</caption>
              <thead>
                <tr>
                  <th scope="col">Upstream</th>
                  <th scope="col">Health</th>
                  <th scope="col">Since</th>
                  <th scope="col">Last error</th>
                </tr>
              </thead>
              <tbody>
                {s.upstreams.map((u) => (
                  <tr key={u.name}>
                    <td data-label="Upstream">{u.name}</td>
                    <td data-label="Health">
                      <Health ok={u.healthy} up="up" down="down" />
                    </td>
                    <td data-label="Since">
                      <Time s={u.since} relative />
                    </td>
                    <td data-label="Last error">{u.last_error === undefined ? <span class="muted">admin keys only</span> : (u.last_error ?? "—")}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          {replicas && replicas.upstreams.length > 0 && <ReplicaTables upstreams={replicas.upstreams} history={replicas.history} />}

          <h2>Models</h2>
          <table class="list">
            <caption class="sr-only">Models, their health and load</caption>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col">Owned by</th>
                <th scope="col">Health</th>
                <th scope="col">In flight</th>
                <th scope="col">Queued</th>
              </tr>
            </thead>
            <tbody>
              {s.models.map((m) => (
                <tr key={m.id}>
                  <td data-label="Model" class="mono">
                    {m.id}
                  </td>
                  <td data-label="Owned by">{m.owned_by}</td>
                  <td data-label="Health">
                    <Health ok={m.healthy} />
                  </td>
                  <td data-label="In flight">{fmtInt(m.in_flight)}</td>
                  <td data-label="Queued">{fmtInt(m.queued)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

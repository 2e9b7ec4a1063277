// The engines (replicas) of each upstream on the Status page
// (docs/CONTRACT.md §21): GET /upstreams, which only admin keys may read.
// Each replica's requests in flight are kept here, one reading per refresh
// of the page, and drawn as a sparkline: a few lines of inline SVG, no
// chart library (the console's size budget).
import type { Upstream, UpstreamReplica } from "../types";

/** Readings kept per replica: at the Status page's refresh of 5 s, the last 5 minutes. */
export const HISTORY = 60;

/** In flight per replica id, oldest first. */
export type History = ReadonlyMap<string, readonly number[]>;

/** `history` with this reading of every listed replica; a replica no longer listed is forgotten. */
export function withReading(history: History, upstreams: Upstream[]): History {
  const next = new Map<string, number[]>();
  for (const u of upstreams)
    for (const r of u.replicas) {
      const past = history.get(r.id) ?? [];
      next.set(r.id, [...past.slice(-(HISTORY - 1)), r.in_flight]);
    }
  return next;
}

const STATE_BADGE: Record<UpstreamReplica["state"], string> = { active: "badge-completed", draining: "badge-cancelling", down: "badge-failed" };

const W = 120;
const H = 24;

/** In flight over the last readings, newest at the right; the scale's top is the limit (or the peak, if above it). */
function Sparkline({ values, limit, id }: { values: readonly number[]; limit: number | null; id: string }) {
  const top = Math.max(1, limit ?? 0, ...values);
  const step = W / (HISTORY - 1);
  const x0 = W - (values.length - 1) * step;
  const xy = values.map((v, i) => [x0 + i * step, H - 2 - (v / top) * (H - 4)] as const);
  const last = xy[xy.length - 1];
  const now = values[values.length - 1] ?? 0;
  const peak = Math.max(0, ...values);
  return (
    <svg class="spark" width={W} height={H} viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`In flight on ${id} over the last ${values.length} readings: now ${now}, peak ${peak}`}>
      <line class="spark-base" x1={0} x2={W} y1={H - 2} y2={H - 2} stroke="currentColor" stroke-width={1} />
      {xy.length > 1 && <polyline points={xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ")} fill="none" stroke="currentColor" stroke-width={1.5} />}
      {last && <circle cx={last[0]} cy={last[1]} r={2} fill="currentColor" />}
    </svg>
  );
}

/** A table of its replicas for each upstream. */
export function ReplicaTables({ upstreams, history }: { upstreams: Upstream[]; history: History }) {
  return (
    <>
      {upstreams.map((u) => (
        <div key={u.name}>
          <h3>
            Replicas of {u.name}
            {u.engine && <span class="muted"> · {u.engine}</span>}
          </h3>
          <table class="list">
            <caption class="sr-only">Replicas of {u.name}: state, load, health and latency</caption>
            <thead>
              <tr>
                <th scope="col">Replica</th>
                <th scope="col">Base URL</th>
                <th scope="col">State</th>
                <th scope="col">In flight / limit</th>
                <th scope="col">Health</th>
                <th scope="col">Latency</th>
                <th scope="col">In flight, last readings</th>
              </tr>
            </thead>
            <tbody>
              {u.replicas.map((r) => (
                <tr key={r.id}>
                  <td data-label="Replica" class="mono" title={r.id}>
                    {r.id.slice(0, 12)}
                  </td>
                  <td data-label="Base URL" class="mono url">
                    {r.base_url}
                  </td>
                  <td data-label="State">
                    <span class={`badge ${STATE_BADGE[r.state]}`}>{r.state}</span>
                  </td>
                  <td data-label="In flight / limit">
                    {r.in_flight} / {r.concurrency_limit ?? "—"}
                  </td>
                  <td data-label="Health">
                    <span class={`badge ${r.healthy ? "badge-completed" : "badge-failed"}`}>{r.healthy ? "healthy" : "unhealthy"}</span>
                  </td>
                  <td data-label="Latency">{r.latency_ms == null ? "—" : `${r.latency_ms} ms`}</td>
                  <td data-label="In flight, last readings" class="spark-cell">
                    <Sparkline values={history.get(r.id) ?? [r.in_flight]} limit={r.concurrency_limit} id={r.id} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ))}
    </>
  );
}

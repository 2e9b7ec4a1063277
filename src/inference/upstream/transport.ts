// How offpeak reaches an engine: the one transport for interactive requests
// (main thread) and batch lines (Workers), and the one GET /models for
// discovery and health probes.
//
// POSTs go through offpeak's strict client (./httpClient.ts) for plain-http
// upstreams, through fetch for https and behind an HTTP proxy (the strict
// client speaks neither), or through fetch everywhere with
// `upstream_client: fetch`. The choice is made once per model, here
// (ownClientFor), and travels with the model's spec to the Workers.
import type { UpstreamAnswer } from "./answer";
import type { Deadline } from "./deadline";
import { CallFailure, classify, type Fate } from "./fate";
import { canUseOwnClient, postOwn } from "./httpClient";

export type UpstreamClientSetting = "builtin" | "fetch";

/** Where a model's calls go and how. */
export interface UpstreamTarget {
  /** The upstream's base_url without a trailing slash. */
  baseUrl: string | null;
  apiKey: string | null;
  /** Through the strict client (see ownClientFor); fetch when false or absent. */
  ownClient?: boolean;
}

/** Whether calls to `baseUrl` go through offpeak's own client: the `upstream_client` setting, and plain http without a proxy. */
export function ownClientFor(baseUrl: string, setting: UpstreamClientSetting, env: Record<string, string | undefined>): boolean {
  return setting === "builtin" && canUseOwnClient(baseUrl, env);
}

/**
 * POSTs the JSON text `body` to the target's `path`; answers once the status
 * and headers have arrived (the body is read from the answer). `deadline`
 * ends the call at any point, body included.
 */
export function postJson(target: UpstreamTarget, path: string, body: string, deadline: Deadline): Promise<UpstreamAnswer> {
  const url = target.baseUrl + path;
  if (target.ownClient) return postOwn(url, target.apiKey, body, deadline);
  return fetch(url, { method: "POST", headers: jsonHeaders(target.apiKey), body, signal: deadline.signal });
}

function jsonHeaders(apiKey: string | null): Record<string, string> {
  return apiKey ? { "content-type": "application/json", authorization: `Bearer ${apiKey}` } : { "content-type": "application/json" };
}

export type ModelsAnswer =
  /** `ids`: the model ids listed, or null when the body is not an OpenAI list. */
  | { ok: true; ids: string[] | null }
  /** `fate` says why (a refused connection is `cause: "refused"`); `error` says it in words ("GET /models answered HTTP 503"). */
  | { ok: false; fate: Fate; error: string };

/**
 * `GET {baseUrl}/models` with the upstream's key: its model list, and a
 * look at whether it answers at all. Through fetch: a few calls a minute,
 * off every hot path.
 */
export async function getModels(baseUrl: string, apiKey: string | null, timeoutMs: number): Promise<ModelsAnswer> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(baseUrl.replace(/\/+$/, "") + "/models", {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await res.text();
  } catch (e) {
    const fate = classify(new CallFailure(e));
    const error = fate.kind === "engine_failure" && fate.cause === "timeout" ? `no answer within ${timeoutMs} ms` : ((e as Error).message ?? String(e));
    return { ok: false, fate, error: `GET /models: ${error}` };
  }
  const fate = classify(res);
  if (fate.kind !== "answer") return { ok: false, fate, error: `GET /models answered HTTP ${res.status}` };
  return { ok: true, ids: modelIds(text) };
}

function modelIds(text: string): string[] | null {
  try {
    const body = JSON.parse(text) as { data?: { id?: unknown }[] } | null;
    if (typeof body !== "object" || body === null) return null;
    const ids: string[] = [];
    for (const m of Array.isArray(body.data) ? body.data : []) if (typeof m?.id === "string") ids.push(m.id);
    return ids;
  } catch {
    return null;
  }
}

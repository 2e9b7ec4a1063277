// One delivery attempt: check where the URL leads now (./egress.ts), then
// POST to that checked address itself — an IP URL with the endpoint's Host
// header, and for https the endpoint's name as TLS server name (SNI and the
// certificate check both use it) — so no second resolution can lead
// elsewhere. Redirects are not followed: a 3xx is a failed attempt.
//
// What is recorded is the status code, or one coarse error class: never the
// receiver's body (not even read) nor an error's text (Bun's name the URL,
// which may hold a token in its query; a receiver could make them say
// anything). The class's cause goes to the log as a code only.
import { checkTarget, hostKey, type EgressPolicy, type Resolver, systemResolver } from "./egress";
import { ipBytes } from "../net/addresses";

/** The `error` of a delivery record when no answer came (docs/CONTRACT.md §16): documented in OPERATING.md. */
export type DeliveryError = "target_not_allowed" | "dns_failed" | "connect_failed" | "timeout" | "tls_error";

export interface Attempt {
  statusCode: number | null;
  /** null: delivered (2xx); `HTTP <status>` for another answer; else a DeliveryError. */
  error: string | null;
  /** For the log only: the refused address's kind, or the error's code. */
  detail?: string;
}

export async function postWebhook(
  url: string,
  headers: Record<string, string>,
  body: string,
  policy: EgressPolicy,
  /** `resolve` and `ca` (a certificate to trust besides the system's) are for tests. */
  opts: { timeoutMs: number; resolve?: Resolver; ca?: string },
): Promise<Attempt> {
  const signal = AbortSignal.timeout(opts.timeoutMs);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { statusCode: null, error: "connect_failed", detail: "bad_url" };
  }
  const resolving = checkTarget(u.hostname, policy, opts.resolve ?? systemResolver);
  // The lookup shares the attempt's time limit (getaddrinfo has none of its own).
  const timedOut = new Promise<"timeout">((r) => signal.addEventListener("abort", () => r("timeout"), { once: true }));
  const verdict = await Promise.race([resolving, timedOut]);
  if (verdict === "timeout") return { statusCode: null, error: "timeout", detail: "dns" };
  if (!verdict.ok)
    return verdict.reason === "not_allowed"
      ? { statusCode: null, error: "target_not_allowed", detail: verdict.class }
      : { statusCode: null, error: "dns_failed", detail: verdict.code };

  const dial = new URL(u);
  dial.hostname = verdict.family === 6 ? `[${verdict.address}]` : verdict.address;
  dial.hash = "";
  const name = hostKey(u.hostname);
  const tls = u.protocol !== "https:" ? undefined : { ...(ipBytes(name) ? {} : { serverName: name }), ...(opts.ca ? { ca: opts.ca } : {}) };
  try {
    const res = await fetch(dial, { method: "POST", headers: { ...headers, host: u.host }, body, redirect: "manual", signal, tls });
    // The answer's body means nothing to us; don't hold the connection for it.
    await res.body?.cancel().catch(() => {});
    return { statusCode: res.status, error: res.status >= 200 && res.status <= 299 ? null : `HTTP ${res.status}` };
  } catch (e) {
    return failure(e);
  }
}

/** A fetch error → its class (and its code, for the log). */
export function failure(e: unknown): Attempt {
  const err = e as { name?: unknown; code?: unknown };
  const code = typeof err?.code === "string" ? err.code : typeof err?.name === "string" ? err.name : "unknown";
  if (err?.name === "TimeoutError" || err?.name === "AbortError") return { statusCode: null, error: "timeout", detail: code };
  // Certificate checks (DEPTH_ZERO_SELF_SIGNED_CERT, ERR_TLS_CERT_ALTNAME_INVALID, CERT_HAS_EXPIRED,
  // UNABLE_TO_VERIFY_LEAF_SIGNATURE, …) and a failed handshake (Bun: EPROTO).
  if (/CERT|TLS|SSL|SIGNATURE|ISSUER|HANDSHAKE|^EPROTO$/i.test(code)) return { statusCode: null, error: "tls_error", detail: code };
  return { statusCode: null, error: "connect_failed", detail: code };
}

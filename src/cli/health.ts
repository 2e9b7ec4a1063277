// offpeak healthcheck: GET /healthz on the local server, for container
// HEALTHCHECKs on images without curl. Exit 0 healthy, 1 not.
import { clientEnv, type ClientEnv } from "../config";
import { parseVerb, usageError } from "./args";

export const HEALTHCHECK_HELP = `offpeak healthcheck — probe a server's /healthz (for container health checks)

Usage:
  offpeak healthcheck [--url URL] [--timeout SECONDS]

  --url   default http://127.0.0.1:$PORT/healthz (PORT from the environment, else 8080)

Exit codes: 0 healthy; 1 not answering "ok" in time.
`;

export async function healthcheckCommand(argv: string[], env: ClientEnv = clientEnv()): Promise<number> {
  const p = parseVerb(argv, { url: "string", timeout: "string" });
  if (p.bools.help) {
    process.stdout.write(HEALTHCHECK_HELP);
    return 0;
  }
  const url = p.flags.url ?? env.healthUrl;
  const seconds = Number(p.flags.timeout ?? 5);
  if (!(seconds >= 0.1 && seconds <= 3600)) throw usageError(`--timeout must be a number of seconds from 0.1 to 3600, got "${p.flags.timeout}"`);
  const timeoutMs = seconds * 1000;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    if (res.status === 200 && text.trim() === "ok") return 0;
    process.stderr.write(`offpeak healthcheck: ${url} answered ${res.status}\n`);
  } catch (e) {
    process.stderr.write(`offpeak healthcheck: ${url}: ${(e as Error).message}\n`);
  }
  return 1;
}

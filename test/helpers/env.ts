// The environment and ports of child processes that tests start.

/** Names a child never inherits from the test's own environment: offpeak's settings, and PORT/HOST (which serve reads). */
const NEVER = (k: string) => k.startsWith("OFFPEAK_") || k === "PORT" || k === "HOST";

/**
 * The test's environment without any offpeak settings (so that a setting of
 * the person running the tests never reaches a child), less whatever `drop`
 * also names, plus `extra`.
 */
export function cleanEnv(extra: Record<string, string> = {}, drop: (name: string) => boolean = () => false): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !NEVER(k) && !drop(k)) env[k] = v;
  return { ...env, ...extra };
}

/** A TCP port on 127.0.0.1 that was free a moment ago (for a child told which port to take). */
export function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

// Knobs only tests set, to make time pass faster: not settings (no flag, no
// config-file key, not in the docs' tables). Read once at start, with the
// settings (src/config.ts), from the same environment.
import { intOf, type Env } from "./setting";

export interface TestKnobs {
  /** Length of one "minute" of rpm/tpm in seconds (OFFPEAK_RATE_LIMIT_MINUTE_SECONDS, 1–60): 60, shortened by tests of the cluster's limits. */
  rateLimitMinuteSeconds: number;
  /** Length of one "h" of completion_window in seconds (OFFPEAK_BATCH_HOUR_SECONDS, 1–3600): 3600, shortened by tests of expiry. */
  batchHourSeconds: number;
  /** The first webhook retry's delay in ms (OFFPEAK_WEBHOOK_RETRY_BASE_MS, 1–5000; later ones scale with it): 5000, shortened by tests. */
  webhookRetryBaseMs: number;
}

export function testKnobsOf(env: Env): TestKnobs {
  return {
    rateLimitMinuteSeconds: intOf("OFFPEAK_RATE_LIMIT_MINUTE_SECONDS", env.OFFPEAK_RATE_LIMIT_MINUTE_SECONDS, 1, 60) ?? 60,
    batchHourSeconds: intOf("OFFPEAK_BATCH_HOUR_SECONDS", env.OFFPEAK_BATCH_HOUR_SECONDS, 1, 3600) ?? 3600,
    webhookRetryBaseMs: intOf("OFFPEAK_WEBHOOK_RETRY_BASE_MS", env.OFFPEAK_WEBHOOK_RETRY_BASE_MS, 1, 5000) ?? 5000,
  };
}

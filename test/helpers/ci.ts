// Under CI (CI=true, as .ci/run is run), a test that needs something from the
// machine (chromium, strace, a Python with the openai SDK) must not be
// skipped: .ci/run installs what they need, so a missing one is a failure.
import { test } from "bun:test";

export const IN_CI = !!process.env.CI && process.env.CI !== "false" && process.env.CI !== "0";

/**
 * For a suite that cannot run here (`why` says what is missing): under CI a
 * test that fails saying so; elsewhere a warning, and the suite's own tests
 * are skipped.
 */
export function missingPrerequisite(name: string, why: string, excuse?: string): void {
  // .ci/run says so when a CI machine has no package index pip can reach
  // (PyPI is not among CI's registries): a skip said out loud, with its
  // reason in the log, never a quiet one.
  if (IN_CI && excuse) {
    console.warn(`SKIPPED UNDER CI, as .ci/run declared: ${excuse} (${why})`);
    return;
  }
  if (IN_CI) {
    test(`${name} (required under CI)`, () => {
      throw new Error(`${why}; under CI=true this is a failure, not a skip (.ci/run installs it)`);
    });
  } else console.warn(`SKIPPED ${why}`);
}

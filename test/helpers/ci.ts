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
export function missingPrerequisite(name: string, why: string): void {
  if (IN_CI) {
    test(`${name} (required under CI)`, () => {
      throw new Error(`${why}; under CI=true this is a failure, not a skip (.ci/run installs it)`);
    });
  } else console.warn(`SKIPPED ${why}`);
}

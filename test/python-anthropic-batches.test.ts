// docs/CONTRACT.md §22, Message Batches, with the official Python `anthropic` SDK:
// test/python/anthropic_batches_check.py creates a batch on offpeak-echo,
// retrieves it until it ends, reads its results, lists and deletes it, its
// base URL the server's root. Needs a python that can `import anthropic`
// (OFFPEAK_PYTHON, or python3); without it the test is skipped with the
// reason printed, and fails under CI=true (.ci/run installs it).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { missingPrerequisite } from "./helpers/ci";
import { startTestServer, type TestServer } from "./helpers/server";

const python = process.env.OFFPEAK_PYTHON || "python3";
/** null when there is no such program (also an OFFPEAK_PYTHON path that does not exist). */
const probe = (() => {
  if (!Bun.which(python) && !python.includes("/")) return null;
  try {
    return Bun.spawnSync([python, "-c", "import anthropic; print(anthropic.__version__)"], { stderr: "pipe" });
  } catch {
    return null;
  }
})();
const available = probe?.exitCode === 0;
if (!available)
  missingPrerequisite(
    "the Python anthropic SDK is there",
    `python-anthropic-batches.test.ts: ${probe ? `${python} cannot import anthropic (${probe.stderr.toString().trim().split("\n").pop()})` : `${python} not found`}; ` +
      "install it (pip install anthropic) or set OFFPEAK_PYTHON to a python that has it",
    process.env.OFFPEAK_PYTHON_UNAVAILABLE,
  );

let t: TestServer;

beforeAll(async () => {
  if (!available) return;
  t = await startTestServer({});
});
afterAll(async () => {
  await t?.stop();
});

test.skipIf(!available)(`the Python anthropic SDK (${python}, anthropic ${probe?.stdout?.toString().trim() ?? "?"}): a message batch made, read and deleted`, async () => {
  const proc = Bun.spawn([python, join(import.meta.dir, "python", "anthropic_batches_check.py")], {
    env: { ...process.env, ANTHROPIC_BASE_URL: t.url, ANTHROPIC_API_KEY: t.admin, PYTHONDONTWRITEBYTECODE: "1" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`anthropic_batches_check.py exited ${code}\n${out}\n${err}`);
  expect(out).toContain("all ok");
  expect(out.split("\n").filter((l) => l.startsWith("ok: ")).length).toBe(6);
});

// docs/CONTRACT.md §13 with the official Python SDK: test/python/sdk_check.py drives
// Responses and Completions (plain, streamed, responses.stream()) and a
// batch on each endpoint, on offpeak-echo and through a fake engine. Needs
// a python3 that can `import openai` (or OFFPEAK_PYTHON naming one); without
// it the test is skipped with the reason printed (README: "Python SDK"), and
// fails under CI=true (.ci/run makes one).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { missingPrerequisite } from "./helpers/ci";
import { configWriter } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";

const python = process.env.OFFPEAK_PYTHON || "python3";
/** null when there is no such program (also an OFFPEAK_PYTHON path that does not exist). */
const probe = (() => {
  if (!Bun.which(python) && !python.includes("/")) return null;
  try {
    return Bun.spawnSync([python, "-c", "import openai; print(openai.__version__)"], { stderr: "pipe" });
  } catch {
    return null;
  }
})();
const available = probe?.exitCode === 0;
if (!available)
  missingPrerequisite(
    "the Python SDK is there",
    `python-sdk.test.ts: ${probe ? `${python} cannot import openai (${probe.stderr.toString().trim().split("\n").pop()})` : `${python} not found`}; ` +
      "install it (pip install openai) or set OFFPEAK_PYTHON to a python that has it",
    process.env.OFFPEAK_PYTHON_UNAVAILABLE,
  );

let t: TestServer;
let fake: FakeUpstream;
const cfg = configWriter("offpeak-python-sdk-");

beforeAll(async () => {
  if (!available) return;
  fake = await startFakeUpstream({ models: ["fake-model"] });
  const config = cfg.write("config.json", { upstreams: [{ name: "fake", base_url: fake.baseUrl, models: ["fake-model"] }] });
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t?.stop();
  await fake?.stop();
  cfg.cleanup();
});

test.skipIf(!available)(`the Python SDK (${python}, openai ${probe?.stdout?.toString().trim() ?? "?"}): responses and completions, plain, streamed and in batches`, async () => {
  const proc = Bun.spawn([python, join(import.meta.dir, "python", "sdk_check.py")], {
    env: { ...process.env, OPENAI_BASE_URL: t.base, OPENAI_API_KEY: t.admin, OFFPEAK_UPSTREAM_MODEL: "fake-model", PYTHONDONTWRITEBYTECODE: "1" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`sdk_check.py exited ${code}\n${out}\n${err}`);
  expect(out).toContain("all ok");
  expect(out.split("\n").filter((l) => l.startsWith("ok: ")).length).toBeGreaterThanOrEqual(14);
});

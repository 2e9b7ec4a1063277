// The client commands of the executable (`offpeak files …`, `offpeak batches
// …`, `offpeak batch run …`, `offpeak healthcheck`): the real entry point
// `bun src/main.ts`, run as a child process against a real server on port 0.
// Their stderr is a pipe, so progress is in its plain (non-terminal) form.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chatLine, startTestServer, type TestServer } from "./helpers/server";
import { formatDuration, Progress, renderBar, renderPlain } from "../src/cli/progress";
import { SCENARIO_MS } from "./helpers/wait";
import { cleanEnv, freePort } from "./helpers/env";

const ROOT = join(import.meta.dir, "..");
const MAIN = join(ROOT, "src/main.ts");

let t: TestServer;
let work: string;

/** The environment without offpeak settings inherited from the caller. */
interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `offpeak ARGS` against the test server (base URL and admin key in the environment unless overridden). */
async function cli(args: string[], env: Record<string, string> = {}, cwd = work): Promise<Run> {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], {
    cwd,
    env: cleanEnv({ OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin, ...env }),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** A failed expectation shows what the command printed. */
function expectCode(r: Run, code: number): void {
  if (r.code !== code) throw new Error(`expected exit ${code}, got ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
}

function writeLines(name: string, lines: string[]): string {
  const path = join(work, name);
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

const ids = (n: number, prefix = "c") => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
const parseLines = (text: string) =>
  text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } | null; error: unknown });

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "offpeak-cli-client-"));
  // A slow-enough echo model (2 ms per line, 2 at a time: 8000 lines take 8 s) so a batch can be cancelled while it runs.
  const config = join(work, "config.json");
  writeFileSync(config, JSON.stringify({ models: { "offpeak-echo": { latency_ms: 2, max_concurrency: 2 } } }));
  // The webhook test registers a loopback URL, which only an opened host may be (docs/CONTRACT.md §16).
  t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2", OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "127.0.0.1" } });
});

afterAll(async () => {
  await t?.stop();
  rmSync(work, { recursive: true, force: true });
});

describe("help", () => {
  test("offpeak --help lists the client commands; each group has its own help", async () => {
    const top = await cli(["--help"]);
    expectCode(top, 0);
    for (const w of ["files upload", "batches create", "batch run", "OFFPEAK_BASE_URL", "OFFPEAK_API_KEY", "Exit codes"]) expect(top.stdout).toContain(w);
    for (const [group, words] of [
      ["files", ["upload", "list", "get", "download", "rm", "--base-url", "--api-key"]],
      ["batches", ["create", "get", "list", "cancel", "retry", "wait", "Exit codes"]],
      ["webhooks", ["create", "list", "rm", "whsec_", "Exit codes"]],
      ["batch", ["run", "--out", "--errors", "--endpoint", "Exit codes"]],
      ["healthcheck", ["--url"]],
    ] as const) {
      const r = await cli([group, "--help"]);
      expectCode(r, 0);
      for (const w of words) expect(r.stdout).toContain(w);
    }
    const verbHelp = await cli(["files", "upload", "--help"]);
    expectCode(verbHelp, 0);
    expect(verbHelp.stdout).toContain("offpeak files upload FILE");
  });
});

describe("files", () => {
  test("upload → list → get → download (file and stdout) → rm", async () => {
    const path = writeLines("files.jsonl", ids(5).map((id) => chatLine(id)));
    const bytes = readFileSync(path);

    const up = await cli(["files", "upload", path]);
    expectCode(up, 0);
    const file = JSON.parse(up.stdout);
    expect(file).toMatchObject({ object: "file", purpose: "batch", status: "processed", filename: "files.jsonl", bytes: bytes.length });
    expect(file.id).toMatch(/^file-[0-9A-Za-z]{24}$/);
    expect(up.stderr).toContain(`uploaded ${path} → ${file.id}`);

    const list = await cli(["files", "list", "--purpose", "batch"]);
    expectCode(list, 0);
    expect(list.stdout.split("\n")[0]).toMatch(/^ID\s+BYTES\s+CREATED\s+PURPOSE\s+FILENAME$/);
    expect(list.stdout).toContain(file.id);
    const listJson = await cli(["files", "list", "--json", "--limit", "1", "--order", "desc"]);
    expectCode(listJson, 0);
    expect(JSON.parse(listJson.stdout)).toMatchObject({ object: "list", data: [{ id: file.id }] });

    const get = await cli(["files", "get", file.id]);
    expectCode(get, 0);
    expect(JSON.parse(get.stdout)).toEqual(file);

    const out = join(work, "downloaded.jsonl");
    const dl = await cli(["files", "download", file.id, "--out", out]);
    expectCode(dl, 0);
    expect(readFileSync(out).equals(bytes)).toBe(true);
    expect(existsSync(out + ".part")).toBe(false);
    const dlStdout = await cli(["files", "download", file.id]);
    expectCode(dlStdout, 0);
    expect(dlStdout.stdout).toBe(bytes.toString());

    const rm = await cli(["files", "rm", file.id]);
    expectCode(rm, 0);
    expect(rm.stdout).toBe(`deleted ${file.id}\n`);
    const gone = await cli(["files", "get", file.id]);
    expectCode(gone, 2);
    expect(gone.stderr).toContain("404");
    expect(gone.stderr).toContain("not_found");
  });

  test("a bad batch file is refused with the server's message naming the line (exit 2)", async () => {
    const path = writeLines("bad.jsonl", [chatLine("a"), chatLine("a")]);
    const r = await cli(["files", "upload", path]);
    expectCode(r, 2);
    expect(r.stderr).toMatch(/line 2: duplicate custom_id/);
  });
});

describe("batches", () => {
  test("create → get → wait (exit 0, final record) → list", async () => {
    const file = (await t.sdk().files.create({ file: new File([ids(4).map((id) => chatLine(id)).join("\n")], "b.jsonl"), purpose: "batch" })).id;
    const created = await cli(["batches", "create", file, "--metadata", "team=a", "--metadata", "run=1"]);
    expectCode(created, 0);
    const batch = JSON.parse(created.stdout);
    expect(batch).toMatchObject({ object: "batch", status: "validating", input_file_id: file, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { team: "a", run: "1" } });

    const got = await cli(["batches", "get", batch.id]);
    expectCode(got, 0);
    expect(JSON.parse(got.stdout).id).toBe(batch.id);

    const waited = await cli(["batches", "wait", batch.id, "--interval", "0.05"]);
    expectCode(waited, 0);
    const final = JSON.parse(waited.stdout);
    expect(final).toMatchObject({ id: batch.id, status: "completed", request_counts: { total: 4, completed: 4, failed: 0 } });
    expect(waited.stderr).toContain(`${batch.id} completed 4/4 (100.0%)`);

    const list = await cli(["batches", "list", "--limit", "5"]);
    expectCode(list, 0);
    expect(list.stdout.split("\n")[0]).toMatch(/^ID\s+STATUS\s+COMPLETED\s+FAILED\s+TOTAL\s+CREATED\s+ENDPOINT$/);
    expect(list.stdout).toMatch(new RegExp(`${batch.id}\\s+completed\\s+4\\s+0\\s+4\\s`));
    const listJson = await cli(["batches", "list", "--json"]);
    expect(JSON.parse(listJson.stdout).data.map((b: { id: string }) => b.id)).toContain(batch.id);
  });

  test("cancel a running batch → wait exits 1 and says cancelled; cancelling it again after the end is refused (exit 2)", async () => {
    const file = (await t.sdk().files.create({ file: new File([ids(8000, "slow").map((id) => chatLine(id)).join("\n")], "slow.jsonl"), purpose: "batch" })).id;
    const created = await cli(["batches", "create", file]);
    expectCode(created, 0);
    const id = JSON.parse(created.stdout).id as string;
    const cancelled = await cli(["batches", "cancel", id]);
    expectCode(cancelled, 0);
    expect(["cancelling", "cancelled"]).toContain(JSON.parse(cancelled.stdout).status);

    const waited = await cli(["batches", "wait", id, "--interval", "0.05"]);
    expectCode(waited, 1);
    expect(JSON.parse(waited.stdout).status).toBe("cancelled");
    expect(waited.stderr).toContain(`batch ${id} cancelled`);

    const again = await cli(["batches", "cancel", id]);
    expectCode(again, 2);
    expect(again.stderr).toContain("409");
  });
});

describe("following a batch", () => {
  /** offpeak_http_requests_total for GET on a route pattern, summed over statuses. */
  const gets = async (route: string) => {
    const text = await (await t.api("/metrics")).text();
    let n = 0;
    for (const line of text.split("\n"))
      if (line.startsWith("offpeak_http_requests_total{") && line.includes(`method="GET"`) && line.includes(`route="${route}"`)) n += Number(line.split(" ").pop());
    return n;
  };

  test("batches wait follows the event stream (GET /batches/{id}/events), not polling", async () => {
    const file = (await t.sdk().files.create({ file: new File([ids(400, "ev").map((id) => chatLine(id)).join("\n")], "ev.jsonl"), purpose: "batch" })).id;
    const batch = await t.sdk().batches.create({ input_file_id: file, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const polls = await gets("/api/v1/batches/:id");
    const streams = await gets("/api/v1/batches/:id/events");
    const waited = await cli(["batches", "wait", batch.id, "--interval", "0.05"]);
    expectCode(waited, 0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id: batch.id, status: "completed", request_counts: { total: 400, completed: 400, failed: 0 } });
    expect(await gets("/api/v1/batches/:id/events")).toBe(streams + 1);
    // With --interval 0.05 polling would have asked many times while 400 lines ran.
    expect(await gets("/api/v1/batches/:id")).toBe(polls);
  });
});

describe("retry and webhooks", () => {
  test("batches retry: a new batch of the failed lines, metadata retry_of", async () => {
    const lines = [chatLine("rt-ok"), JSON.stringify({ custom_id: "rt-bad", method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", n: 0, messages: [{ role: "user", content: "x" }] } })];
    const file = (await t.sdk().files.create({ file: new File([lines.join("\n")], "rt.jsonl"), purpose: "batch" })).id;
    const batch = await t.sdk().batches.create({ input_file_id: file, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expectCode(await cli(["batches", "wait", batch.id]), 0);
    const r = await cli(["batches", "retry", batch.id]);
    expectCode(r, 0);
    const again = JSON.parse(r.stdout);
    expect(again.metadata).toEqual({ retry_of: batch.id });
    expect(await (await t.sdk().files.content(again.input_file_id)).text()).toBe(lines[1] + "\n");
    const refused = await cli(["batches", "retry", batch.id + "x"]);
    expectCode(refused, 2);
    // batches list: COMPLETED is the lines that succeeded (the failed one is not among them).
    const listed = await cli(["batches", "list", "--limit", "10"]);
    expect(listed.stdout).toMatch(new RegExp(`${batch.id}\\s+completed\\s+1\\s+1\\s+2\\s`));
  });

  test("webhooks create (secret shown once) → list → rm", async () => {
    const made = await cli(["webhooks", "create", "http://127.0.0.1:9/hook", "--events", "batch.completed,batch.failed"]);
    expectCode(made, 0);
    const ep = JSON.parse(made.stdout);
    expect(ep).toMatchObject({ object: "webhook_endpoint", url: "http://127.0.0.1:9/hook", events: ["batch.completed", "batch.failed"], project: "default" });
    expect(ep.secret).toMatch(/^whsec_/);
    const listed = await cli(["webhooks", "list"]);
    expectCode(listed, 0);
    expect(listed.stdout).toMatch(new RegExp(`${ep.id}\\s+default\\s+batch.completed,batch.failed`));
    expect(listed.stdout).not.toContain("whsec_");
    const gone = await cli(["webhooks", "rm", ep.id]);
    expectCode(gone, 0);
    expect(JSON.parse(gone.stdout)).toEqual({ id: ep.id, object: "webhook_endpoint", deleted: true });
    expectCode(await cli(["webhooks", "rm", ep.id]), 2);
    expectCode(await cli(["webhooks", "create", "ftp://nope"]), 2);
  });
});

describe("--timeout", () => {
  test("batches wait --timeout: gives up with exit 3 and the record as it is; the batch keeps running; a later wait follows it", async () => {
    const file = (await t.sdk().files.create({ file: new File([ids(8000, "to").map((id) => chatLine(id)).join("\n")], "to.jsonl"), purpose: "batch" })).id;
    const id = JSON.parse((await cli(["batches", "create", file])).stdout).id as string;
    const waited = await cli(["batches", "wait", id, "--interval", "0.05", "--timeout", "0.5"]);
    expectCode(waited, 3);
    const record = JSON.parse(waited.stdout);
    expect({ id: record.id, final: ["completed", "failed", "expired", "cancelled"].includes(record.status) }).toEqual({ id, final: false });
    expect(waited.stderr).toContain(`timed out after 0.5 s: batch ${id} is ${record.status} and keeps running on the server`);
    // Still running on the server: the timeout only stopped the client.
    expect((await t.sdk().batches.retrieve(id)).status).not.toBe("cancelled");
    await t.sdk().batches.cancel(id);
    const after = await cli(["batches", "wait", id, "--interval", "0.05", "--timeout", "60"]);
    expectCode(after, 1);
    expect(JSON.parse(after.stdout).status).toBe("cancelled");
  });

  test("batch run --timeout: exit 3, nothing downloaded, the batch named on stderr", async () => {
    const input = writeLines("slow-run.jsonl", ids(8000, "sr").map((id) => chatLine(id)));
    const out = join(work, "slow-run.out.jsonl");
    const r = await cli(["batch", "run", input, "--out", out, "--interval", "0.05", "--timeout", "0.5"]);
    expectCode(r, 3);
    const id = /batch (batch_[0-9A-Za-z]{24}) is/.exec(r.stderr)?.[1];
    expect(id).toBeDefined();
    expect(existsSync(out)).toBe(false);
    await t.sdk().batches.cancel(id!);
  });

  test("--timeout also bounds a wait for an unreachable server (exit 2 when no record was ever seen)", async () => {
    const port = freePort();
    const r = await cli(["batches", "wait", "batch_x", "--interval", "0.05", "--timeout", "1"], { OFFPEAK_BASE_URL: `http://127.0.0.1:${port}/v1` });
    expectCode(r, 2);
    expect(r.stderr).toMatch(/cannot reach offpeak/);
  }, SCENARIO_MS);

  test("batch run checks --timeout before uploading: a bad value leaves no file and no batch behind", async () => {
    const input = writeLines("typo.jsonl", ids(3, "ty").map((id) => chatLine(id)));
    // Counted by name and input: an earlier test's batch may finish meanwhile and add its result files.
    const named = async () => (await t.sdk().files.list()).data.filter((f) => f.filename === "typo.jsonl").length;
    const batchesBefore = (await t.sdk().batches.list({ limit: 100 })).data.length;
    const r = await cli(["batch", "run", input, "--timeout", "1h"]);
    expectCode(r, 2);
    expect(r.stderr).toMatch(/--timeout must be a number/);
    expect(await named()).toBe(0);
    expect((await t.sdk().batches.list({ limit: 100 })).data.length).toBe(batchesBefore);
  });

  test("a bad --timeout is a usage error", async () => {
    const r = await cli(["batches", "wait", "batch_x", "--timeout", "-1"]);
    expectCode(r, 2);
    expect(r.stderr).toMatch(/--timeout must be a number/);
  });
});

describe("batch run", () => {
  test("end to end: results and errors files hold every custom_id once; exit 0; plain progress on a pipe", async () => {
    const good = ids(24, "ok");
    const lines = good.map((id) => chatLine(id));
    lines.splice(7, 0, chatLine("bad1", "x", { n: 0 })); // the echo model refuses n=0: an error line
    const input = writeLines("run.jsonl", lines);
    const out = join(work, "run-out.jsonl");
    const errs = join(work, "run-err.jsonl");

    const r = await cli(["batch", "run", input, "--out", out, "--errors", errs, "--interval", "0.05", "--progress-interval", "0.05"]);
    expectCode(r, 0);
    const results = parseLines(readFileSync(out, "utf8"));
    const errors = parseLines(readFileSync(errs, "utf8"));
    expect(results.map((l) => l.custom_id).sort()).toEqual([...good].sort());
    expect(new Set(results.map((l) => l.custom_id)).size).toBe(good.length);
    expect(results.every((l) => l.response?.status_code === 200)).toBe(true);
    expect(errors.map((l) => l.custom_id)).toEqual(["bad1"]);
    expect(errors[0]!.response?.status_code).toBe(400);

    expect(r.stdout).toMatch(/^batch_[0-9A-Za-z]{24} completed: 24 completed, 1 failed of 25 in \S+\n/);
    expect(r.stdout).toContain(`results: ${out} (24 lines)`);
    expect(r.stdout).toContain(`errors: ${errs} (1 line)`);

    // Not a terminal: whole lines only, no carriage returns or escape codes.
    expect(r.stderr).not.toContain("\r");
    expect(r.stderr).not.toContain("\x1b[");
    expect(r.stderr).toMatch(/^uploading .+\/.+ \(100\.0%\)$/m);
    expect(r.stderr).toMatch(/^uploaded .*run\.jsonl → file-[0-9A-Za-z]{24} /m);
    expect(r.stderr).toMatch(/^created batch_[0-9A-Za-z]{24} \(25 requests, \/v1\/chat\/completions\)$/m);
    const progress = r.stderr.split("\n").filter((l) => /^batch_[0-9A-Za-z]{24} (validating|in_progress|finalizing|completed) \d+\/\d+/.test(l));
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress[progress.length - 1]).toMatch(/ completed 25\/25 \(100\.0%\), 1 failed$/);
  });

  test("defaults: the endpoint comes from the first line, outputs go beside the input, no errors file when nothing failed", async () => {
    const embed = (id: string) => JSON.stringify({ custom_id: id, method: "POST", url: "/v1/embeddings", body: { model: "offpeak-embed", input: `text ${id}` } });
    const input = writeLines("emb.jsonl", ids(6, "e").map(embed));
    const r = await cli(["batch", "run", input, "--interval", "0.05", "--quiet"]);
    expectCode(r, 0);
    expect(r.stderr).toBe("");
    const results = parseLines(readFileSync(join(work, "emb.results.jsonl"), "utf8"));
    expect(results.map((l) => l.custom_id).sort()).toEqual(ids(6, "e").sort());
    expect(existsSync(join(work, "emb.errors.jsonl"))).toBe(false);
    // A rerun that fails nothing removes an earlier run's errors file (it would pass for this run's).
    writeFileSync(join(work, "emb.errors.jsonl"), '{"stale":true}\n');
    const again = await cli(["batch", "run", input, "--interval", "0.05", "--quiet"]);
    expectCode(again, 0);
    expect(again.stdout).toContain("removed");
    expect(existsSync(join(work, "emb.errors.jsonl"))).toBe(false);
  });

  test("the endpoint comes from a first line longer than 1 MiB too", async () => {
    const big = JSON.stringify({ custom_id: "big", method: "POST", url: "/v1/embeddings", body: { model: "offpeak-embed", input: "word ".repeat(250_000) } });
    expect(big.length).toBeGreaterThan(1 << 20);
    const small = JSON.stringify({ custom_id: "small", method: "POST", url: "/v1/embeddings", body: { model: "offpeak-embed", input: "x" } });
    const input = writeLines("big-first.jsonl", [big, small]);
    const r = await cli(["batch", "run", input, "--interval", "0.05", "--quiet"]);
    expectCode(r, 0);
    expect(parseLines(readFileSync(join(work, "big-first.results.jsonl"), "utf8")).map((l) => l.custom_id).sort()).toEqual(["big", "small"]);
  });

  test("a batch that fails validation (unknown model): exit 1, the reason on stderr, no results written", async () => {
    const input = writeLines("unknown-model.jsonl", [chatLine("u1"), chatLine("u2", "x", { model: "no-such-model" })]);
    const out = join(work, "unknown-out.jsonl");
    const r = await cli(["batch", "run", input, "--out", out, "--interval", "0.05"]);
    expectCode(r, 1);
    // Nothing ran: request_counts are all 0 (completed + failed = total).
    expect(r.stdout).toMatch(/ failed: 0 completed, 0 failed of 0/);
    expect(r.stderr).toMatch(/batch batch_[0-9A-Za-z]{24} failed:\n {2}Line 2: .*no-such-model/);
    expect(existsSync(out)).toBe(false);
  });
});

describe("exit 2: usage and connection errors", () => {
  test("bad usage: each with a clear message on stderr", async () => {
    const cases: [string[], RegExp, Record<string, string>?][] = [
      [["files"], /offpeak files upload FILE/],
      [["files", "frobnicate"], /unknown files command 'frobnicate'/],
      [["files", "get"], /missing FILE_ID/],
      [["files", "get", "a", "b"], /unexpected argument 'b'/],
      [["files", "list", "--bogus"], /unknown option --bogus/],
      [["files", "list", "--limit"], /--limit needs a value/],
      [["batch", "run"], /missing FILE\.jsonl/],
      [["batch", "run", join(tmpdir(), "does-not-exist.jsonl")], /cannot read .*does-not-exist\.jsonl/],
      [["batch", "run", "x.jsonl", "--out", "/no/such/dir/out.jsonl"], /--out \/no\/such\/dir\/out\.jsonl: its folder does not exist/],
      [["batch", "run", writeLines("no-url.jsonl", ["not a request"])], /cannot tell the endpoint .*--endpoint/],
      [["batch", "run", writeLines("ok.jsonl", [chatLine("o1")]), "--out", tmpdir()], /--out .* is a folder/],
      [["batches", "wait", "batch_x", "--interval", "abc"], /--interval must be a number/],
      [["batches", "list", "--base-url", "ftp://x"], /--base-url must be http/],
      [["files", "list"], /no API key/, { OFFPEAK_API_KEY: "" }],
    ];
    for (const [args, message, env] of cases) {
      const r = await cli(args, env);
      if (r.code !== 2 || !message.test(r.stderr)) throw new Error(`offpeak ${args.join(" ")}: exit ${r.code}, stderr ${JSON.stringify(r.stderr)}`);
      expect(r.stdout).toBe("");
    }
  });

  test("without --base-url or OFFPEAK_BASE_URL the client finds the server on PORT (as in its container)", async () => {
    const port = new URL(t.url).port;
    const r = await cli(["files", "list"], { OFFPEAK_BASE_URL: "", PORT: port });
    expectCode(r, 0);
  });

  test("a wrong key: the server's 401 with a hint", async () => {
    const r = await cli(["files", "list"], { OFFPEAK_API_KEY: "sk-op-wrong" });
    expectCode(r, 2);
    expect(r.stderr).toContain("HTTP 401");
    expect(r.stderr).toContain("--api-key");
    expect(r.stderr).not.toContain("sk-op-wrong");
  });

  test("an unreachable server", async () => {
    const port = freePort();
    for (const args of [["files", "list"], ["batches", "get", "batch_x"], ["batch", "run", writeLines("unreach.jsonl", [chatLine("a")])]]) {
      const r = await cli([...args, "--base-url", `http://127.0.0.1:${port}/v1`]);
      expectCode(r, 2);
      expect(r.stderr).toContain(`cannot reach offpeak at http://127.0.0.1:${port}/v1`);
    }
  });
});

describe("healthcheck", () => {
  test("0 against a live server, 1 against nothing", async () => {
    expectCode(await cli(["healthcheck", "--url", `${t.url}/healthz`]), 0);
    const port = freePort();
    const down = await cli(["healthcheck"], { PORT: String(port) });
    expectCode(down, 1);
    expect(down.stderr).toContain(`http://127.0.0.1:${port}/healthz`);
  });
});

describe("progress rendering", () => {
  test("terminal: one line redrawn in place with bar, done/total, rate and ETA", () => {
    const line = renderBar({ label: "in_progress", done: 5200, total: 10000, failed: 3, unit: "lines" }, 1234, 100);
    expect(line).toMatch(/^in_progress \[█+░+\]  52%  5,200\/10,000  1,234 lines\/s  ETA 4s  3 failed$/);
    expect(line.length).toBeLessThan(100);
    expect(renderBar({ label: "in_progress", done: 5200, total: 10000, unit: "lines" }, 1234, 40).length).toBeLessThan(40);

    const writes: string[] = [];
    const p = new Progress({ sink: { write: (s: string) => writes.push(s), isTTY: true, columns: 100 } });
    p.update({ label: "in_progress", done: 0, total: 100, unit: "lines" }, 0);
    p.update({ label: "in_progress", done: 50, total: 100, unit: "lines" }, 1000);
    p.update({ label: "completed", done: 100, total: 100, unit: "lines" }, 1500);
    p.finishLine();
    expect(writes.slice(0, 3).every((w) => w.startsWith("\r") && w.endsWith("\x1b[K"))).toBe(true);
    expect(writes[1]).toContain("50/100  50.0 lines/s  ETA 1s");
    expect(writes[3]).toBe("\n");
  });

  test("plain: a line at each status change and every interval, not more", () => {
    const writes: string[] = [];
    const p = new Progress({ sink: { write: (s: string) => writes.push(s), isTTY: false }, plainEveryMs: 5000, prefix: "batch_x " });
    p.update({ label: "validating", done: 0, total: 100, unit: "lines" }, 0);
    p.update({ label: "in_progress", done: 10, total: 100, unit: "lines" }, 1000);
    p.update({ label: "in_progress", done: 20, total: 100, unit: "lines" }, 2000);
    p.update({ label: "in_progress", done: 70, total: 100, failed: 2, unit: "lines" }, 7000);
    p.update({ label: "completed", done: 100, total: 100, failed: 2, unit: "lines" }, 7500);
    expect(writes).toEqual([
      "batch_x validating 0/100 (0.0%)\n",
      "batch_x in_progress 10/100 (10.0%)\n",
      "batch_x in_progress 70/100 (70.0%) 10.0 lines/s ETA 3s, 2 failed\n",
      "batch_x completed 100/100 (100.0%), 2 failed\n",
    ]);
    expect(renderPlain("", { label: "uploading", done: 1536, total: 3072, unit: "B" }, 1024)).toBe("uploading 1.50 KiB/3.00 KiB (50.0%) 1.00 KiB/s ETA 2s");
    expect([formatDuration(59), formatDuration(61), formatDuration(3725), formatDuration(90000)]).toEqual(["59s", "1m01s", "1h02m", "1d01h"]);
  });
});

/** Runs a command line the CLI printed, as a person would paste it (sh -c), in the test's folder and environment. */
async function runPrinted(command: string): Promise<Run> {
  const proc = Bun.spawn(["sh", "-c", command], { cwd: work, env: cleanEnv({ OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin }), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** The command after "LABEL: " on its own line of `text`. */
function printedCommand(text: string, label: string): string {
  const line = text.split("\n").find((l) => l.trim().startsWith(`${label}: `));
  if (!line) throw new Error(`no "${label}:" line in ${JSON.stringify(text)}`);
  return line.trim().slice(label.length + 2);
}

describe("resuming a batch (docs/CONTRACT.md §19)", () => {
  test("batches wait --out --errors downloads the results when the batch ends; an older errors file there is replaced", async () => {
    const lines = ids(30, "wo").map((id) => chatLine(id));
    lines.splice(4, 0, chatLine("wo-bad", "x", { n: 0 }));
    const file = (await t.sdk().files.create({ file: new File([lines.join("\n")], "wo.jsonl"), purpose: "batch" })).id;
    const batch = await t.sdk().batches.create({ input_file_id: file, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const out = join(work, "wo.results.jsonl");
    const errs = join(work, "wo.errors.jsonl");
    writeFileSync(errs, '{"stale":true}\n');
    const r = await cli(["batches", "wait", batch.id, "--out", out, "--errors", errs, "--interval", "0.05"]);
    expectCode(r, 0);
    expect(JSON.parse(r.stdout)).toMatchObject({ id: batch.id, status: "completed" }); // stdout stays the record
    expect(parseLines(readFileSync(out, "utf8")).map((l) => l.custom_id).sort()).toEqual(ids(30, "wo").sort());
    expect(parseLines(readFileSync(errs, "utf8")).map((l) => l.custom_id)).toEqual(["wo-bad"]);
    expect(r.stderr).toContain(`results: ${out} (30 lines)`);
    expect(r.stderr).toContain(`errors: ${errs} (1 line)`);
    // Without --errors: the failed lines are named, not fetched.
    const onlyOut = await cli(["batches", "wait", batch.id, "--out", join(work, "wo2.jsonl")]);
    expectCode(onlyOut, 0);
    expect(onlyOut.stderr).toMatch(/errors: 1 line failed, not downloaded \(.* files download file-[0-9A-Za-z]{24} --out FILE\)/);
    // A place that cannot be written is refused before waiting.
    const bad = await cli(["batches", "wait", batch.id, "--out", "/no/such/dir/x.jsonl"]);
    expectCode(bad, 2);
    expect(bad.stderr).toMatch(/--out \/no\/such\/dir\/x\.jsonl: its folder does not exist/);
  });

  test("batch run --timeout prints a batches wait command; run as printed, it follows the batch and downloads its results", async () => {
    const input = writeLines("resume-to.jsonl", ids(1500, "rt").map((id) => chatLine(id)));
    const out = join(work, "resume to.results.jsonl"); // a space: the printed command must quote it
    const r = await cli(["batch", "run", input, "--out", out, "--interval", "0.05", "--timeout", "0.3"]);
    expectCode(r, 3);
    expect(existsSync(out)).toBe(false);
    // Said up front, and again when it stops.
    const upFront = printedCommand(r.stderr, "if this stops before the batch ends, resume with");
    const resume = printedCommand(r.stderr, "to follow it and download the results when it ends");
    expect(resume).toBe(upFront);
    expect(resume).toMatch(/ batches wait batch_[0-9A-Za-z]{24} --out '.*resume to\.results\.jsonl' --errors .*resume-to\.errors\.jsonl$/);
    // Outside the checkout the CLI is named by its path (npx finds it only inside).
    expect(resume.startsWith(`${ROOT}/bin/offpeak batches wait`)).toBe(true);
    const resumed = await runPrinted(resume);
    expectCode(resumed, 0);
    expect(parseLines(readFileSync(out, "utf8"))).toHaveLength(1500);
    expect(resumed.stderr).toContain("(1,500 lines)");
  }, SCENARIO_MS);

  test("Ctrl-C at the first thing batch run prints (the upload): the CLI's own handler exits 130, not the signal's default action", async () => {
    // Bun installs a SIGINT handler a loop turn after process.on(): one set
    // only when a step has something to say leaves a window in which Ctrl-C
    // kills the process silently. The listener is there from the start.
    const input = writeLines("early-int.jsonl", ids(3000, "ei").map((id) => chatLine(id)));
    const proc = Bun.spawn([process.execPath, MAIN, "batch", "run", input, "--out", join(work, "early-int.out.jsonl"), "--interval", "0.05"], {
      cwd: work,
      env: cleanEnv({ OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin }),
      stdout: "pipe",
      stderr: "pipe",
      stdin: "ignore",
    });
    const reader = proc.stderr.getReader();
    await reader.read(); // its first bytes on stderr
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(130);
    expect(proc.signalCode).toBeNull();
    reader.releaseLock();
  }, SCENARIO_MS);

  test("Ctrl-C during batch run: exit 130, the batch keeps running, and the command it prints resumes it", async () => {
    const input = writeLines("resume-int.jsonl", ids(3000, "ri").map((id) => chatLine(id)));
    const out = join(work, "resume-int.out.jsonl");
    const errs = join(work, "resume-int.err.jsonl");
    const proc = Bun.spawn([process.execPath, MAIN, "batch", "run", input, "--out", out, "--errors", errs, "--interval", "0.05"], {
      cwd: work,
      env: cleanEnv({ OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin }),
      stdout: "pipe",
      stderr: "pipe",
      stdin: "ignore",
    });
    let stderr = "";
    const reading = (async () => {
      for await (const c of proc.stderr) stderr += new TextDecoder().decode(c);
    })();
    const deadline = Date.now() + 15_000;
    while (!/^created batch_/m.test(stderr) && Date.now() < deadline) await Bun.sleep(20);
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(130);
    expect(proc.signalCode).toBeNull(); // its own handler exited, not the signal's default action
    await reading;
    // On a loaded machine the 3,000 echo lines may be done before the signal
    // lands: then it interrupts the download, which says so and prints the
    // same resume command.
    const running = /interrupted: batch (batch_[0-9A-Za-z]{24}) keeps running on the server/.exec(stderr)?.[1];
    const downloading = /interrupted: the download of batch (batch_[0-9A-Za-z]{24})'s results stopped/.exec(stderr)?.[1];
    const id = running ?? downloading;
    if (!id) throw new Error(`no "interrupted" message on stderr:\n${stderr}`);
    expect(["validating", "in_progress", "finalizing", "completed"]).toContain((await t.sdk().batches.retrieve(id!)).status);
    const resume = running ? printedCommand(stderr, "to follow it and download the results when it ends") : printedCommand(stderr, "to download them");
    expect(resume).toBe(`${ROOT}/bin/offpeak batches wait ${id} --out ${out} --errors ${errs}`);
    if (running) expect(printedCommand(stderr, "to stop it")).toBe(`${ROOT}/bin/offpeak batches cancel ${id}`);
    const resumed = await runPrinted(resume);
    expectCode(resumed, 0);
    expect(parseLines(readFileSync(out, "utf8"))).toHaveLength(3000);
    expect(existsSync(errs)).toBe(false);
  }, SCENARIO_MS);

  test("inside the checkout the CLI's own hints say npx offpeak (package.json bin), as typed there", async () => {
    const r = await cli(["batches", "get"], {}, ROOT);
    expectCode(r, 2);
    expect(r.stderr).toContain("usage: npx offpeak batches get BATCH_ID");
    const help = await cli(["batch", "run", "--help"], {}, ROOT);
    expect(help.stdout).toContain("  npx offpeak batch run FILE.jsonl");
    const unknown = await cli(["files", "frobnicate"], {}, ROOT);
    expect(unknown.stderr).toContain("see npx offpeak files --help");
  });

  test("the help of batch run, batches and the top level give exit code 130 (Ctrl-C) and wait --out", async () => {
    for (const args of [["batch", "run", "--help"], ["batches", "--help"], ["--help"]]) {
      const r = await cli(args);
      expectCode(r, 0);
      expect({ args, has130: /\b130\b.*Ctrl-C|Ctrl-C.*\b130\b/s.test(r.stdout) }).toEqual({ args, has130: true });
    }
    expect((await cli(["batches", "--help"])).stdout).toContain("wait BATCH_ID [--out RESULTS.jsonl] [--errors ERRORS.jsonl]");
  });
});

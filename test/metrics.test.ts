// GET /metrics (Prometheus text format, admin scope) and the structured
// request log. The registry is process-wide, so values are compared as
// deltas between two scrapes.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { chatLine, freshDataDir, startTestServer, type TestServer } from "./helpers/server";
import { plans, startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { pollUntil } from "./helpers/batches";
import { Registry } from "../src/metrics/registry";
import { routeMatcher } from "../src/metrics/http";
import { cleanEnv, freePort } from "./helpers/env";

const ROOT = join(import.meta.dir, "..");
/** Response.json() typed loosely, for assertions. */
const json = (res: Response): Promise<any> => res.json();
const MAIN = join(ROOT, "src/main.ts");

let t: TestServer;
let fake: FakeUpstream;

beforeAll(async () => {
  fake = await startFakeUpstream({ models: ["fake-chat"] });
  t = await startTestServer({ env: { OFFPEAK_UPSTREAM_URL: fake.baseUrl, OFFPEAK_BATCH_RETRY_BASE_MS: "1", OFFPEAK_BATCH_WORKERS: "1" } });
});

afterAll(async () => {
  await t?.stop();
  await fake?.stop();
});

type Samples = Map<string, number>;

/** `name{a="x",b="y"}` → value, with labels in the order they were written. */
function parse(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

const key = (name: string, labels: Record<string, string> = {}) => {
  const l = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return l.length ? `${name}{${l.join(",")}}` : name;
};

async function scrape(): Promise<{ text: string; s: Samples }> {
  const res = await t.api("/metrics");
  expect(res.status).toBe(200);
  const text = await res.text();
  return { text, s: parse(text) };
}

/** after − before for one series (a series absent before counts as 0). */
const delta = (before: Samples, after: Samples, name: string, labels: Record<string, string> = {}) => (after.get(key(name, labels)) ?? 0) - (before.get(key(name, labels)) ?? 0);

async function runBatch(lines: string[]): Promise<{ id: string; status: string }> {
  const client = t.sdk();
  const file = await client.files.create({ file: new File([lines.join("\n") + "\n"], "m.jsonl"), purpose: "batch" });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  return pollUntil(
    () => client.batches.retrieve(batch.id),
    (b) => ["completed", "failed", "expired", "cancelled"].includes(b.status),
    20_000,
    50,
    "batch end",
  );
}

const upstreamLine = (id: string, content: string) =>
  JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "fake-chat", messages: [{ role: "user", content }] } });

describe("GET /metrics: access", () => {
  test("401 without a key (both bases), 403 without the admin scope, 200 text/plain for admin", async () => {
    for (const base of ["/api/v1", "/v1"]) {
      const res = await fetch(`${t.url}${base}/metrics`);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toContain("Bearer");
      expect((await json(res)).error.type).toBe("authentication_error");
    }
    const user = await t.createKey({ scopes: ["files:read", "files:write", "batches:read", "batches:write", "inference"] });
    const denied = await t.api("/metrics", { key: user });
    expect(denied.status).toBe(403);
    expect((await json(denied)).error.code).toBe("insufficient_scope");

    const admin = await t.createKey({ scopes: ["admin"], project: "ops" });
    for (const base of ["/api/v1", "/v1"]) {
      const ok = await fetch(`${t.url}${base}/metrics`, { headers: { authorization: `Bearer ${admin}` } });
      expect(ok.status).toBe(200);
      expect(ok.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
      expect(await ok.text()).toContain("# TYPE offpeak_http_requests_total counter");
    }
  });

  test("every metric is declared with its type", async () => {
    const { text } = await scrape();
    const types: Record<string, string> = {
      offpeak_build_info: "gauge",
      offpeak_process_start_time_seconds: "gauge",
      offpeak_http_requests_total: "counter",
      offpeak_http_request_duration_seconds: "histogram",
      offpeak_batch_lines_processed_total: "counter",
      offpeak_batch_lines_failed_total: "counter",
      offpeak_batches: "gauge",
      offpeak_model_in_flight: "gauge",
      offpeak_model_queue_depth: "gauge",
      offpeak_model_healthy: "gauge",
      offpeak_upstream_requests_total: "counter",
      offpeak_upstream_errors_total: "counter",
      offpeak_upstream_retries_total: "counter",
      offpeak_files_stored: "gauge",
      offpeak_file_bytes_stored: "gauge",
      offpeak_storage_free_bytes: "gauge",
    };
    for (const [name, type] of Object.entries(types)) {
      expect(text).toContain(`# HELP ${name} `);
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
    }
    for (const model of ["offpeak-echo", "offpeak-embed", "fake-chat"]) {
      for (const priority of ["interactive", "batch"]) {
        expect(text).toContain(`${key("offpeak_model_in_flight", { model, priority })} `);
        expect(text).toContain(`${key("offpeak_model_queue_depth", { model, priority })} `);
      }
      expect(text).toContain(`${key("offpeak_model_healthy", { model })} 1\n`);
    }
    expect(text).toMatch(/^offpeak_build_info\{version="\d+\.\d+\.\d+"\} 1$/m);
  });
});

describe("GET /metrics: values move", () => {
  test("HTTP requests by route pattern (not the raw path) and status, with latency histograms", async () => {
    const before = (await scrape()).s;
    for (let i = 0; i < 3; i++) expect((await t.api("/files")).status).toBe(200);
    const missing = "file-ZZZZZZZZZZZZZZZZZZZZZZZZ";
    for (let i = 0; i < 2; i++) expect((await t.api(`/files/${missing}`)).status).toBe(404);
    expect((await t.api("/files", { key: null })).status).toBe(401);
    expect((await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${t.admin}` } })).status).toBe(200);
    expect((await t.api("/no/such/route")).status).toBe(404);
    const { text, s: after } = await scrape();

    const req = (method: string, route: string, status: string) => delta(before, after, "offpeak_http_requests_total", { method, route, status });
    expect(req("GET", "/api/v1/files", "200")).toBe(3);
    expect(req("GET", "/api/v1/files/:id", "404")).toBe(2);
    expect(req("GET", "/api/v1/files", "401")).toBe(1);
    expect(req("GET", "/v1/models", "200")).toBe(1);
    expect(req("GET", "unmatched", "404")).toBe(1);
    expect(text).not.toContain(missing);
    expect(text).not.toContain("/no/such/route");

    const count = (route: string) => delta(before, after, "offpeak_http_request_duration_seconds_count", { method: "GET", route });
    expect(count("/api/v1/files")).toBe(4);
    expect(count("/api/v1/files/:id")).toBe(2);
    expect(delta(before, after, "offpeak_http_request_duration_seconds_bucket", { method: "GET", route: "/api/v1/files", le: "+Inf" })).toBe(4);
    expect(delta(before, after, "offpeak_http_request_duration_seconds_sum", { method: "GET", route: "/api/v1/files" })).toBeGreaterThan(0);
  });

  test("after a batch: lines processed and failed by model, batches by status, stored files and bytes", async () => {
    const before = (await scrape()).s;
    const lines = ["a", "b", "c", "d", "e"].map((id) => chatLine(`m-${id}`));
    lines.push(chatLine("m-bad", "x", { n: 0 })); // refused by the echo model: an error line
    const b = await runBatch(lines);
    expect(b.status).toBe("completed");
    const after = (await scrape()).s;

    expect(delta(before, after, "offpeak_batch_lines_processed_total", { model: "offpeak-echo" })).toBe(6);
    expect(delta(before, after, "offpeak_batch_lines_failed_total", { model: "offpeak-echo" })).toBe(1);
    expect(delta(before, after, "offpeak_batches", { status: "completed" })).toBe(1);
    expect(after.get(key("offpeak_batches", { status: "in_progress" }))).toBe(0);

    // The gauges mirror the database: compare with the files the API lists (all in project default).
    const listed = (await json(await t.api("/files"))).data as { purpose: string; bytes: number }[];
    for (const purpose of ["batch", "batch_output"]) {
      const mine = listed.filter((f) => f.purpose === purpose);
      expect(after.get(key("offpeak_files_stored", { purpose }))).toBe(mine.length);
      expect(after.get(key("offpeak_file_bytes_stored", { purpose }))).toBe(mine.reduce((n, f) => n + f.bytes, 0));
    }
    expect(delta(before, after, "offpeak_files_stored", { purpose: "batch_output" })).toBe(2); // output + error file
    // The data dir's free space; none for a bucket (OFFPEAK_TEST_STORAGE=s3), where the gauge is left out.
    if (t.storage) expect(after.has("offpeak_storage_free_bytes")).toBe(false);
    else expect(after.get("offpeak_storage_free_bytes")).toBeGreaterThan(0);
  });

  test("upstream requests, errors and retries (batch and interactive); in-flight while a request runs", async () => {
    fake.plan = plans.first(
      plans.failFirst(1, { status: 500 }, (c) => c.startsWith("retry-")),
      plans.always({ status: 503 }, (c) => c === "interactive-fails"),
    );
    fake.latencyMs = (c) => (c === "slow" ? 400 : 0);
    try {
      const before = (await scrape()).s;
      const b = await runBatch(["r1", "r2", "r3"].map((id) => upstreamLine(id, `retry-${id}`)));
      expect(b.status).toBe("completed");
      const chat = (content: string) =>
        t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "fake-chat", messages: [{ role: "user", content }] }) });
      expect((await chat("interactive-fails")).status).toBe(502);

      const slow = chat("slow");
      const during = await pollUntil(
        async () => (await scrape()).s,
        (s) => s.get(key("offpeak_model_in_flight", { model: "fake-chat", priority: "interactive" })) === 1,
        5000,
        20,
        "an interactive request in flight",
      );
      expect(during.get(key("offpeak_model_in_flight", { model: "fake-chat", priority: "batch" }))).toBe(0);
      expect((await slow).status).toBe(200);
      const after = (await scrape()).s;

      expect(delta(before, after, "offpeak_upstream_requests_total", { model: "fake-chat", source: "batch" })).toBe(6);
      expect(delta(before, after, "offpeak_upstream_retries_total", { model: "fake-chat" })).toBe(3);
      expect(delta(before, after, "offpeak_upstream_errors_total", { model: "fake-chat", source: "batch", reason: "http_5xx" })).toBe(3);
      expect(delta(before, after, "offpeak_batch_lines_processed_total", { model: "fake-chat" })).toBe(3);
      expect(delta(before, after, "offpeak_batch_lines_failed_total", { model: "fake-chat" })).toBe(0);
      expect(delta(before, after, "offpeak_upstream_requests_total", { model: "fake-chat", source: "interactive" })).toBe(2);
      expect(delta(before, after, "offpeak_upstream_errors_total", { model: "fake-chat", source: "interactive", reason: "http_5xx" })).toBe(1);
      expect(after.get(key("offpeak_model_in_flight", { model: "fake-chat", priority: "interactive" }))).toBe(0);
    } finally {
      fake.plan = null;
      fake.latencyMs = 0;
    }
  });
});

describe("metrics internals", () => {
  test("text format: escaped label values, cumulative histogram buckets", () => {
    const r = new Registry();
    r.counter("x_total", "help with \\ and\nnewline", ["a"]).inc(['q"uo\\te\n'], 2);
    const h = r.histogram("lat_seconds", "h", ["r"], [0.1, 1]);
    for (const v of [0.05, 0.5, 0.5, 5]) h.observe(["/x"], v);
    expect(r.render()).toBe(
      [
        "# HELP x_total help with \\\\ and\\nnewline",
        "# TYPE x_total counter",
        'x_total{a="q\\"uo\\\\te\\n"} 2',
        "# HELP lat_seconds h",
        "# TYPE lat_seconds histogram",
        'lat_seconds_bucket{r="/x",le="0.1"} 1',
        'lat_seconds_bucket{r="/x",le="1"} 3',
        'lat_seconds_bucket{r="/x",le="+Inf"} 4',
        'lat_seconds_sum{r="/x"} 6.05',
        'lat_seconds_count{r="/x"} 4',
        "",
      ].join("\n"),
    );
    expect(() => r.counter("x_total", "again")).toThrow();
  });

  test("route patterns: static before parameters, wildcards, methods", () => {
    const match = routeMatcher([
      { method: "GET", path: "/api/v1/files" },
      { method: "GET", path: "/api/v1/files/:id" },
      { method: "GET", path: "/api/v1/files/:id/content" },
      { method: "POST", path: "/api/v1/batches/:id/cancel" },
      { method: "GET", path: "/api/v1/models/*" },
      { method: "GET", path: "/healthz" },
    ]);
    expect(match("GET", "/api/v1/files/")).toBe("/api/v1/files");
    expect(match("GET", "/api/v1/files/file-abc")).toBe("/api/v1/files/:id");
    expect(match("GET", "/api/v1/files/file-abc/content")).toBe("/api/v1/files/:id/content");
    expect(match("POST", "/api/v1/batches/batch_1/cancel")).toBe("/api/v1/batches/:id/cancel");
    expect(match("GET", "/api/v1/models/meta-llama/Llama-3.1-8B")).toBe("/api/v1/models/*");
    expect(match("HEAD", "/healthz")).toBe("/healthz");
    expect(match("DELETE", "/api/v1/files")).toBe("unmatched");
    expect(match("GET", "/api/v1/files/a/b/c")).toBe("unmatched");
  });
});

describe("structured logs", () => {
  test("one JSON line per request with id, key, project, route, status, duration; batch state changes; no secret anywhere", async () => {
    const dataDir = freshDataDir();
    const admin = "sk-op-log-test-admin-0000000000000000000000";
    const port = freePort();
    const proc: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn([process.execPath, MAIN, "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir], {
      cwd: ROOT,
      env: cleanEnv({ OFFPEAK_ADMIN_KEY: admin, OFFPEAK_LOG_LEVEL: "info" }),
      stdout: "pipe",
      stderr: "pipe",
      stdin: "ignore",
    });
    const stderr = new Response(proc.stderr).text();
    try {
      const url = `http://127.0.0.1:${port}`;
      await pollUntil(() => fetch(`${url}/healthz`).then((r) => r.status, () => 0), (s) => s === 200, 20_000, 50, "server up");
      const auth = (k: string) => ({ authorization: `Bearer ${k}` });

      const created = await fetch(`${url}/api/v1/keys`, {
        method: "POST",
        headers: { ...auth(admin), "content-type": "application/json" },
        body: JSON.stringify({ name: "logged", project: "team-log" }),
      });
      const newKey = (await created.json()) as { id: string; key: string };
      const listed = await fetch(`${url}/api/v1/files?limit=5`, { headers: auth(newKey.key) });
      expect(listed.status).toBe(200);
      const foreign = await fetch(`${url}/v1/files/file-AAAAAAAAAAAAAAAAAAAAAAAA`, { headers: auth(newKey.key) });
      expect(foreign.status).toBe(404);
      // A key in the query string or in the path is refused, and must not reach the log either.
      const inQuery = await fetch(`${url}/api/v1/files?api_key=${newKey.key}`);
      expect(inQuery.status).toBe(401);
      const inPath = await fetch(`${url}/api/v1/files/${newKey.key}`, { headers: auth(admin) });
      expect(inPath.status).toBe(404);

      const form = new FormData();
      form.append("purpose", "batch");
      form.append("file", new Blob([chatLine("l1") + "\n"]), "l.jsonl");
      const file = (await (await fetch(`${url}/api/v1/files`, { method: "POST", body: form, headers: auth(admin) })).json()) as { id: string };
      const batch = (await (
        await fetch(`${url}/api/v1/batches`, {
          method: "POST",
          headers: { ...auth(admin), "content-type": "application/json" },
          body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
        })
      ).json()) as { id: string };
      await pollUntil(
        () => fetch(`${url}/api/v1/batches/${batch.id}`, { headers: auth(admin) }).then((r) => r.json() as Promise<{ status: string }>),
        (b) => b.status === "completed",
        20_000,
        50,
        "batch completed",
      );

      proc.kill("SIGTERM");
      expect(await proc.exited).toBe(0);
      const text = await stderr;
      const lines = text
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const requests = lines.filter((l) => l.msg === "request");

      const byId = (res: Response) => requests.find((l) => l.request_id === res.headers.get("x-request-id"));
      const listLog = byId(listed)!;
      expect(listLog).toMatchObject({ level: "info", method: "GET", route: "/api/v1/files", path: "/api/v1/files", status: 200, key_id: newKey.id, project: "team-log" });
      expect(typeof listLog.duration_ms).toBe("number");
      expect(listLog.duration_ms as number).toBeGreaterThanOrEqual(0);
      expect(typeof listLog.time).toBe("string");
      expect(byId(foreign)).toMatchObject({ route: "/v1/files/:id", status: 404, key_id: newKey.id, project: "team-log" });
      expect(byId(inQuery)).toMatchObject({ route: "/api/v1/files", status: 401, key_id: null, project: null });
      expect(byId(inPath)).toMatchObject({ route: "/api/v1/files/:id", status: 404, key_id: "key_env_admin", project: "default" });
      expect(byId(created)).toMatchObject({ route: "/api/v1/keys", status: 200 });
      // Liveness probes are debug-level: not at info.
      expect(requests.some((l) => l.route === "/healthz")).toBe(false);

      const states = lines.filter((l) => l.batch_id === batch.id).map((l) => l.status);
      expect(states).toEqual(expect.arrayContaining(["validating", "in_progress", "finalizing", "completed"]));

      for (const secret of [admin, newKey.key, newKey.key.slice(6)]) expect(text).not.toContain(secret);
      expect(text.toLowerCase()).not.toContain("bearer ");
    } finally {
      if (proc.exitCode === null) proc.kill("SIGKILL");
      await proc.exited;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});


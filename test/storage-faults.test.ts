// A bucket that misbehaves (docs/CONTRACT.md §17): with a proxy in front of the
// S3-compatible server answering a few percent of the calls with 500
// InternalError or 503 SlowDown, resetting some connections and cutting some
// downloads in the middle (./helpers/faultProxy.ts), a batch still ends
// exact and sends every line upstream exactly once (counted at the fake
// engine), uploads and downloads complete, every download carries
// Content-Length (read on a raw socket), and /metrics counts the retries.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FromWorker, PricedModel, RunTask } from "../src/batches/types";
import { PartCheckpoints, listSegments } from "../src/batches/worker/checkpoints";
import { runShard } from "../src/batches/worker/runShard";
import { takeWorkerMetrics } from "../src/metrics/worker";
import { Bucket } from "../src/storage/bucket";
import type { S3Settings } from "../src/storage/locator";
import { DEFAULT_POLICY, setRetryPolicy } from "../src/storage/retry";
import { chatReq, expectExactlyOnce, readResults, waitBatch } from "./helpers/batches";
import { ChildServer } from "./helpers/child";
import { startFakeUpstream, type FakeUpstream } from "./helpers/fakeUpstream";
import { startFaultProxy, type FaultProxy } from "./helpers/faultProxy";
import { parseMetrics, writeUpstreamConfig } from "./helpers/outage";
import { startPostgres } from "./helpers/postgres";
import { sharedS3, type TestS3 } from "./helpers/s3";
import { ADMIN_KEY, startTestServer, type TestServer } from "./helpers/server";
import { needs, SCENARIO_MS } from "./helpers/wait";

/** A few percent of each fault, as real S3 has them now and then (more than real S3, so that a short test meets every kind). */
const SHARES = { internalError: 0.05, slowDown: 0.03, reset: 0.02, resetMidBody: 0.05 };
const SEED = 20261126;
/** ≈1.9 kB a line: 5,000 lines ≈ 9.6 MB, three shards, an upload of two multipart parts, a download over the in-memory size. */
const LINES = 5000;
const PAD = "pad ".repeat(450);

let s3: TestS3;
let proxy: FaultProxy;
let fake: FakeUpstream;
let t: TestServer;
let cleanup: () => void;
const prefix = `faults${Date.now().toString(36)}`;

const ids = Array.from({ length: LINES }, (_, i) => `f-${i}`);
const contentOf = (id: string) => `${id} ${PAD}`;
const input = ids.map((id) => chatReq(id, contentOf(id), { model: "fake-chat" })).join("\n") + "\n";

beforeAll(async () => {
  s3 = await sharedS3();
  proxy = await startFaultProxy(s3, SHARES, SEED);
  fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 1 });
  const cfg = writeUpstreamConfig("offpeak-faults-", { name: "fake", base_url: fake.baseUrl, models: ["fake-chat"], max_concurrency: 64 });
  cleanup = cfg.cleanup;
  t = await startTestServer({
    argv: ["--config", cfg.path, "--storage-url", `s3://${s3.bucket}/${prefix}`],
    env: { ...proxy.env, OFFPEAK_BATCH_WORKERS: "2", OFFPEAK_BATCH_RETRY_BASE_MS: "10" },
  });
}, SCENARIO_MS);

afterAll(async () => {
  await t?.stop();
  await proxy?.stop();
  await fake?.stop();
  cleanup?.();
});

/** A GET on a raw socket: the answer's head as sent (status line and headers, names lowercased) and its body as framed. */
async function rawGet(url: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Map<string, string>; body: Buffer }> {
  const u = new URL(url);
  const head = [`GET ${u.pathname.replace(/\/$/, "")}${path} HTTP/1.1`, `Host: ${u.host}`, `Authorization: Bearer ${ADMIN_KEY}`, "Connection: close", ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  const raw = await new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    const s = connect(Number(u.port), u.hostname, () => s.write(head.join("\r\n") + "\r\n\r\n"));
    s.on("data", (d: Buffer) => chunks.push(d));
    s.on("end", () => resolve(Buffer.concat(chunks)));
    s.on("error", reject);
  });
  const at = raw.indexOf("\r\n\r\n");
  const [statusLine, ...lines] = raw.subarray(0, at).toString("latin1").split("\r\n");
  const map = new Map<string, string>();
  for (const l of lines) {
    const c = l.indexOf(":");
    map.set(l.slice(0, c).trim().toLowerCase(), l.slice(c + 1).trim());
  }
  return { status: Number(statusLine!.split(" ")[1]), headers: map, body: raw.subarray(at + 4) };
}

/** Bytes with Content-Length and no chunked framing: what a client needs to tell a whole download from a cut one. */
function expectLength(res: { headers: Map<string, string>; body: Buffer }, bytes: number) {
  expect(res.headers.get("transfer-encoding")).toBeUndefined();
  expect(res.headers.get("content-length")).toBe(String(bytes));
  expect(res.body.length).toBe(bytes);
}

/** The sum of a metric's series whose labels contain `labels` (all of them by default). */
const metric = async (name: string, labels = "") => {
  const res = await t.api("/metrics");
  let sum = 0;
  for (const [k, v] of parseMetrics(await res.text())) if (k.startsWith(`${name}{`) && k.includes(labels)) sum += v;
  return sum;
};

describe("a bucket answering a few percent 500 / 503 / resets", () => {
  let fileId: string;
  let batch: Awaited<ReturnType<TestServer["sdk"]> extends infer C ? any : never>;

  test("an upload (multipart) completes and reads back exact, with every multipart call failing its first try", async () => {
    // Beyond the shares: CreateMultipartUpload and each UploadPart fail once
    // (500); the first CompleteMultipartUpload is done by the bucket but its
    // answer is lost (a reset), so the second finds the upload gone and the
    // object there.
    proxy.plan = (c) => (c.attempt > 1 ? null : c.op === "POST uploads" || c.op === "PUT part" ? "internal_error" : c.op === "POST upload" ? "reset_after_answer" : null);
    const before = await metric("offpeak_storage_retries_total");
    const file = await t.sdk().files.create({ file: new File([input], "faults.jsonl"), purpose: "batch" });
    proxy.plan = null;
    expect(proxy.stats.byOp["internal_error POST uploads"]).toBeGreaterThanOrEqual(1);
    expect(proxy.stats.byOp["internal_error PUT part"]).toBeGreaterThanOrEqual(2);
    expect(proxy.stats.byOp["reset_after_answer POST upload"]).toBe(1);
    expect(await metric("offpeak_storage_retries_total", 'op="upload_part"')).toBeGreaterThanOrEqual(2);
    expect(await metric("offpeak_storage_retries_total")).toBeGreaterThanOrEqual(before + 4);
    fileId = file.id;
    expect(file.bytes).toBe(Buffer.byteLength(input));
    // In the bucket, whole (read past the proxy).
    const stored = await s3.client.file(`${prefix}/${file.id}`).text();
    expect(stored === input).toBe(true);
    expect(s3.pendingUploads()).toEqual([]);
  }, SCENARIO_MS);

  test("a batch of 5,000 lines ends exact, and every line went upstream exactly once", async () => {
    needs(fileId, "an upload (multipart) completes and reads back exact, with every multipart call failing its first try");
    const client = t.sdk();
    // Beyond the shares: every PUT (the Workers' checkpoints and part
    // objects: the HTTP thread uploads nothing meanwhile) and every listing
    // fails its first try.
    proxy.plan = (c) => (c.attempt === 1 && (c.op === "PUT" || c.op === "GET list") ? "slow_down" : null);
    const putRetries = await metric("offpeak_storage_retries_total", 'op="put"');
    batch = await client.batches.create({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await waitBatch(client, batch.id, undefined, 90_000);
    batch = done;
    proxy.plan = null;
    // The Workers' retries, counted in /metrics through their messages.
    expect(await metric("offpeak_storage_retries_total", 'op="put"')).toBeGreaterThan(putRetries);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    const out = await readResults(client, done.output_file_id);
    expect(await readResults(client, done.error_file_id)).toEqual([]);
    // Each custom_id once, with its own answer.
    expect(out.map((l) => l.custom_id).sort()).toEqual([...ids].sort());
    for (const l of out) expect(l.response!.body.choices[0].message.content).toBe(contentOf(l.custom_id));
    // Resends: none. Every line's content was received upstream exactly once.
    const resent = ids.filter((id) => fake.counts.get(contentOf(id)) !== 1);
    expect({ resent: resent.length, first: resent.slice(0, 5).map((id) => [id, fake.counts.get(contentOf(id)) ?? 0]) }).toEqual({ resent: 0, first: [] });
    expect(fake.stats.requests).toBe(LINES);
  }, SCENARIO_MS);

  test("downloads through the node carry Content-Length (and Content-Range), whole and ranged, plain and composed", async () => {
    needs(fileId, "an upload (multipart) completes and reads back exact, with every multipart call failing its first try");
    needs(batch?.output_file_id, "a batch of 5,000 lines ends exact, and every line went upstream exactly once");
    const inBytes = Buffer.from(input);
    // The input file: over the in-memory size (read through a spool file).
    const whole = await rawGet(t.base, `/files/${fileId}/content`);
    expect(whole.status).toBe(200);
    expectLength(whole, inBytes.length);
    expect(whole.body.equals(inBytes)).toBe(true);
    const mid = await rawGet(t.base, `/files/${fileId}/content`, { Range: "bytes=1000-5999999" });
    expect(mid.status).toBe(206);
    expect(mid.headers.get("content-range")).toBe(`bytes 1000-5999999/${inBytes.length}`);
    expectLength(mid, 5_999_000);
    expect(mid.body.equals(inBytes.subarray(1000, 6_000_000))).toBe(true);
    // The output file: composed of the shards' part objects.
    const out = await (await t.api(`/files/${batch.output_file_id}/content`)).arrayBuffer();
    const outBytes = Buffer.from(out);
    const composed = await rawGet(t.base, `/files/${batch.output_file_id}/content`);
    expectLength(composed, outBytes.length);
    expect(composed.body.equals(outBytes)).toBe(true);
    const span = await rawGet(t.base, `/files/${batch.output_file_id}/content`, { Range: `bytes=10-${outBytes.length - 11}` });
    expect(span.status).toBe(206);
    expect(span.headers.get("content-range")).toBe(`bytes 10-${outBytes.length - 11}/${outBytes.length}`);
    expectLength(span, outBytes.length - 20);
    expect(span.body.equals(outBytes.subarray(10, outBytes.length - 10))).toBe(true);
    const suffix = await rawGet(t.base, `/files/${batch.output_file_id}/content`, { Range: "bytes=-100" });
    expectLength(suffix, 100);
    expect(suffix.body.equals(outBytes.subarray(outBytes.length - 100))).toBe(true);
    // GET /batches/{id}/output once the batch has ended: the same bytes, with Content-Length.
    const viaBatch = await rawGet(t.base, `/batches/${batch.id}/output`);
    expectLength(viaBatch, outBytes.length);
    expect(viaBatch.body.equals(outBytes)).toBe(true);
    // Many small ones (each a few bucket calls): none cut, none failed.
    for (let i = 0; i < 30; i++) {
      const start = i * 1000;
      const r = await rawGet(t.base, `/files/${fileId}/content`, { Range: `bytes=${start}-${start + 499}` });
      expect(r.status).toBe(206);
      expectLength(r, 500);
      expect(r.body.equals(inBytes.subarray(start, start + 500))).toBe(true);
    }
  }, SCENARIO_MS);

  test("faults of all five kinds were injected, and /metrics counts the retries (HTTP thread and Workers)", async () => {
    console.log(`fault proxy: ${proxy.stats.requests} bucket calls, ${proxy.faults()} faults`, JSON.stringify(proxy.stats.faults), JSON.stringify(proxy.stats.byOp));
    for (const kind of ["internal_error", "slow_down", "reset", "reset_mid_body", "reset_after_answer"] as const) expect(proxy.stats.faults[kind]).toBeGreaterThan(0);
    const text = await (await t.api("/metrics")).text();
    expect(text).toContain("# TYPE offpeak_storage_retries_total counter");
    console.log(text.split("\n").filter((l) => l.startsWith("offpeak_storage_retries_total")).join("\n"));
    expect(await metric("offpeak_storage_retries_total")).toBeGreaterThan(10);
  });
});

/** The bucket as offpeak reaches it: through the proxy. */
const viaProxy = (): S3Settings => ({ bucket: s3.bucket, endpoint: proxy.endpoint, region: "us-east-1", accessKeyId: "S3RVER", secretAccessKey: "S3RVER" });
const echo: PricedModel = {
  id: "offpeak-echo",
  kind: "echo",
  baseUrl: null,
  apiKey: null,
  upstreamModel: null,
  timeoutMs: 60_000,
  latencyMs: 2,
  tokensPerSecond: 0,
  upstreamIdx: -1,
  upstream: null,
  batchPriority: null,
  inputPerMillion: 0,
  outputPerMillion: 0,
  limited: false,
  sharedBase: -1,
};
const linesOf = (path: string) => readFileSync(path, "utf8").split("\n").filter((l) => l !== "");

/** Only the faults a test's plan picks (the shares would make its short retry budget run out anywhere). */
function quietBucket() {
  let shares: FaultProxy["shares"];
  beforeAll(() => {
    shares = { ...proxy.shares };
    Object.assign(proxy.shares, { internalError: 0, slowDown: 0, reset: 0, resetMidBody: 0 });
  });
  afterAll(() => void Object.assign(proxy.shares, shares));
}

describe("every kind of bucket call, each failing its first try", () => {
  quietBucket();
  test("a file put as a multipart upload (its parts read again from the file), then read whole, by range and as a stream, listed, sized and deleted", async () => {
    const dir = mkdtempSync(join(tmpdir(), "offpeak-bucket-"));
    const firstTry: Record<string, "internal_error" | "slow_down" | "reset" | "reset_mid_body" | "reset_after_answer"> = {
      "POST uploads": "internal_error",
      "PUT part": "slow_down",
      "POST upload": "reset_after_answer",
      PUT: "reset",
      HEAD: "reset",
      GET: "reset_mid_body",
      "GET range": "reset_mid_body",
      "GET list": "internal_error",
      DELETE: "slow_down",
    };
    try {
      const bytes = Uint8Array.from({ length: 12 * 1024 * 1024 + 7 }, (_, i) => (i * 131 + (i >> 13)) & 255);
      const path = join(dir, "big.bin");
      await Bun.write(path, bytes);
      proxy.plan = (c) => (c.attempt === 1 ? (firstTry[c.op] ?? null) : null);
      const bucket = new Bucket(viaProxy());
      const key = `${prefix}/bucket/big`;
      const faultsBefore = { ...proxy.stats.byOp };
      await bucket.put(key, Bun.file(path));
      await bucket.put(`${prefix}/bucket/small`, Bun.file(path).slice(100, 5000));
      expect(await bucket.size(key)).toBe(bytes.length);
      expect(await bucket.size(`${prefix}/bucket/none`)).toBeNull();
      expect(Buffer.from(await bucket.bytes(key)).equals(Buffer.from(bytes))).toBe(true);
      expect(Buffer.from(await bucket.bytes(key, { start: 5_000_000, end: 9_000_000 })).equals(Buffer.from(bytes.subarray(5_000_000, 9_000_000)))).toBe(true);
      const streamed = new Uint8Array(await new Response(bucket.stream(key, 3, bytes.length - 3)).arrayBuffer());
      expect(Buffer.from(streamed).equals(Buffer.from(bytes.subarray(3, bytes.length - 3)))).toBe(true);
      expect(Buffer.from(await bucket.blob(`${prefix}/bucket/small`).slice(10, 20).arrayBuffer()).equals(Buffer.from(bytes.subarray(110, 120)))).toBe(true);
      expect((await bucket.keys(`${prefix}/bucket/`)).map((k) => k.key).sort()).toEqual([key, `${prefix}/bucket/small`]);
      await bucket.delete(key);
      await bucket.delete(`${prefix}/bucket/small`);
      expect(await bucket.keys(`${prefix}/bucket/`)).toEqual([]);
      // Every kind of call met its fault; the upload left no incomplete multipart upload behind.
      const met = Object.keys(proxy.stats.byOp).filter((k) => proxy.stats.byOp[k] !== faultsBefore[k]);
      for (const [op, kind] of Object.entries(firstTry)) expect(met).toContain(`${kind} ${op}`);
      expect(s3.pendingUploads()).toEqual([]);
    } finally {
      proxy.plan = null;
      rmSync(dir, { recursive: true, force: true });
    }
  }, SCENARIO_MS);
});

describe("a shard run that fails anyway (the bucket gone for longer than the retries)", () => {
  quietBucket();
  // Run in this thread, as a Worker runs it, with a short retry budget (this thread's policy).
  test("puts every line it finished into the bucket: the next run, on another node, sends none of them again", async () => {
    const N = 2000;
    const ids = Array.from({ length: N }, (_, i) => `s-${i}`);
    const body = ids.map((id) => chatReq(id, `${id} ${"x".repeat(200)}`)).join("\n") + "\n";
    const key = `${prefix}/shard-input`;
    await s3.client.file(key).write(body);
    const dir = mkdtempSync(join(tmpdir(), "offpeak-shard-"));
    const loc = (k: string) => ({ s3: viaProxy(), key: `${prefix}/${k}` });
    const task = (claim: number, node: string): RunTask => ({
      type: "run",
      batchId: "batch_shard_test",
      idx: 0,
      input: loc("shard-input"),
      start: 0,
      end: Buffer.byteLength(body),
      endpoint: "/v1/chat/completions",
      outPath: join(dir, `${node}-out`),
      errPath: join(dir, `${node}-err`),
      partTargets: { out: { object: loc(`out.parts/0.${claim}`), checkpoints: loc("out.parts/0") }, err: { object: loc(`err.parts/0.${claim}`), checkpoints: loc("err.parts/0") } },
      claim,
      stopCode: null,
      deadline: Date.now() + 600_000,
      maxAttempts: 3,
      retryBaseMs: 10,
      concurrency: 64,
    });
    /** Lines a run computed (its countLine calls, as its messages carry them). */
    const computed = (messages: FromWorker[]) => {
      let n = 0;
      for (const m of messages) if ("metrics" in m && m.metrics) n += m.metrics.lines["offpeak-echo"]?.[0] ?? 0;
      return n;
    };
    const before = setRetryPolicy({ minTries: 2, maxTries: 2, budgetMs: 0, sleep: async () => {} });
    try {
      takeWorkerMetrics();
      // Run 1: the input's answer is cut half way, and every read after that fails.
      proxy.plan = (c) => (c.path.endsWith("/shard-input") && c.method === "GET" ? (c.attempt === 1 ? "reset_mid_body" : "internal_error") : null);
      const first: FromWorker[] = [];
      const err = await runShard(task(1, "a"), new Map([[echo.id, echo]]), { stopCode: null, pausing: false }, (m) => first.push(m)).catch((e) => e);
      proxy.plan = null;
      expect(err?.code).toBe("InternalError");
      first.push({ type: "progress", batchId: "", idx: 0, totals: {} as never, metrics: takeWorkerMetrics() });
      const finished = linesOf(join(dir, "a-out")).length;
      expect(finished).toBeGreaterThan(0);
      expect(finished).toBeLessThan(N);
      expect(computed(first)).toBe(finished);
      // Run 2, on another node (no local files): restores from the checkpoints and finishes.
      const second: FromWorker[] = [];
      await runShard(task(2, "b"), new Map([[echo.id, echo]]), { stopCode: null, pausing: false }, (m) => second.push(m));
      const done = second.at(-1)!;
      expect(done.type).toBe("done");
      const out = linesOf(join(dir, "b-out")).map((l) => JSON.parse(l).custom_id as string);
      expect(out.sort()).toEqual([...ids].sort());
      // No line computed twice: run 2 computed exactly what run 1 had not finished.
      expect({ resent: computed(first) + computed(second) - N }).toEqual({ resent: 0 });
      // The part object is the whole part; the checkpoints are gone.
      expect((await s3.client.file(`${prefix}/out.parts/0.2`).text()) === readFileSync(join(dir, "b-out"), "utf8")).toBe(true);
      expect(await s3.keys(`${prefix}/out.parts/0.ckpt/`)).toEqual([]);
    } finally {
      setRetryPolicy(before);
      proxy.plan = null;
      rmSync(dir, { recursive: true, force: true });
    }
  }, SCENARIO_MS);
});

describe("checkpoint segments are removed last first, only this run's and earlier ones", () => {
  quietBucket();
  test("a clear cut short leaves a chain that restores; a later run's segments stay", async () => {
    const dir = mkdtempSync(join(tmpdir(), "offpeak-ckpt-"));
    const part = { s3: viaProxy(), key: `${prefix}/clear.parts/0` };
    const before = setRetryPolicy({ minTries: 2, maxTries: 2, budgetMs: 0, sleep: async () => {} });
    try {
      const path = (n: string) => join(dir, n);
      const write = async (p: string, text: string) => Bun.write(p, (await Bun.file(p).exists()) ? (await Bun.file(p).text()) + text : text);
      // Run 1 checkpoints three segments, run 2 takes over and adds two, run 3 one.
      const lines = Array.from({ length: 6 }, (_, i) => `{"custom_id":"c-${i}"}\n`);
      const run = async (claim: number, file: string, add: string[]) => {
        const c = new PartCheckpoints(part, path(file), claim);
        let size = await c.restore();
        for (const l of add) {
          await write(path(file), l);
          size += l.length;
          await c.flush(size);
        }
        return c;
      };
      await run(1, "one", lines.slice(0, 3));
      const second = await run(2, "two", lines.slice(3, 5));
      await run(3, "three", lines.slice(5));
      const segments = async () => (await listSegments(part)).sort((a, b) => a.claim - b.claim || a.start - b.start);
      expect((await segments()).map((s) => s.claim)).toEqual([1, 1, 1, 2, 2, 3]);
      // Run 2's clear: from its third deletion on, the bucket fails (more often than the retries here allow).
      const deletes: string[] = [];
      proxy.plan = (c) => {
        if (c.method !== "DELETE") return null;
        deletes.push(c.path.slice(c.path.lastIndexOf("/") + 1));
        return deletes.length >= 3 ? "internal_error" : null;
      };
      expect(await second.clear().catch((e) => e.code)).toBe("InternalError");
      proxy.plan = null;
      // Last first: run 2's two segments, then run 1's last (which failed twice).
      const left = await segments();
      expect(left.map((s) => [s.claim, s.start])).toEqual([
        [1, 0],
        [1, lines[0]!.length],
        [1, lines[0]!.length + lines[1]!.length],
        [3, lines.slice(0, 5).join("").length],
      ]);
      expect(deletes.map((k) => k.split("-")[0])).toEqual(["00000002", "00000002", "00000001", "00000001"]);
      // What is left restores: run 1's three lines (run 3's segment continues nothing now).
      const next = new PartCheckpoints(part, path("four"), 4);
      expect(await next.restore()).toBe(lines.slice(0, 3).join("").length);
      // Run again, the clear finishes, and run 3's segment is still there.
      await second.clear();
      expect((await segments()).map((s) => s.claim)).toEqual([3]);
    } finally {
      setRetryPolicy(before);
      proxy.plan = null;
      rmSync(dir, { recursive: true, force: true });
    }
  }, SCENARIO_MS);
});

describe("two nodes on one Postgres, their bucket behind the same faults", () => {
  const N = 4000;
  const ids = Array.from({ length: N }, (_, i) => `c-${i}`);
  const content = (id: string) => `${id} ${PAD}`;
  let nodes: ChildServer[] = [];
  let dir: string;
  let upstream: FakeUpstream;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "offpeak-faults-cluster-"));
    upstream = await startFakeUpstream({ models: ["fake-chat"], latencyMs: 2 });
    const cfg = join(dir, "config.json");
    await Bun.write(cfg, JSON.stringify({ upstreams: [{ name: "fake", base_url: upstream.baseUrl, models: ["fake-chat"], max_concurrency: 32 }] }));
    const db = await (await startPostgres()).createDatabase();
    const args = ["--config", cfg, "--database-url", db, "--storage-url", `s3://${s3.bucket}/${prefix}-cluster`];
    const env = { ...proxy.env, OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_RETRY_BASE_MS: "10", OFFPEAK_LOG_LEVEL: "error" };
    nodes = await Promise.all([0, 1].map((i) => ChildServer.start({ dataDir: join(dir, `node-${i}`), args, env: { ...env, OFFPEAK_NODE_NAME: `faults-${i}` }, startMs: 60_000 })));
  }, SCENARIO_MS);

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.stop("SIGTERM", 5000)));
    await upstream?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("upload on one, batch on the other: exact, every line upstream once, downloads from either node with Content-Length", async () => {
    const [a, b] = nodes as [ChildServer, ChildServer];
    const text = ids.map((id) => chatReq(id, content(id), { model: "fake-chat" })).join("\n") + "\n";
    const file = await a.client.files.create({ file: new File([text], "cluster.jsonl"), purpose: "batch" });
    const created = await b.client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await waitBatch(b.client, created.id, undefined, 90_000);
    expect(done.status).toBe("completed");
    const out = await readResults(a.client, done.output_file_id);
    expectExactlyOnce(ids, out, await readResults(a.client, done.error_file_id));
    for (const l of out) expect(l.response!.body.choices[0].message.content).toBe(content(l.custom_id));
    const resent = ids.filter((id) => upstream.counts.get(content(id)) !== 1);
    expect({ resent: resent.length }).toEqual({ resent: 0 });
    // Both nodes stayed up through it.
    expect(((await (await a.api("/status")).json()) as any).nodes.filter((n: any) => n.live).length).toBe(2);
    // Downloads from the node that did not upload: bytes from the bucket, with Content-Length.
    const input = await rawGet(b.base, `/files/${file.id}/content`);
    expectLength(input, Buffer.byteLength(text));
    expect(input.body.toString() === text).toBe(true);
    const outBytes = Buffer.from(await (await a.api(`/files/${done.output_file_id}/content`)).arrayBuffer());
    const ranged = await rawGet(b.base, `/files/${done.output_file_id}/content`, { Range: `bytes=7-${outBytes.length - 8}` });
    expect(ranged.headers.get("content-range")).toBe(`bytes 7-${outBytes.length - 8}/${outBytes.length}`);
    expectLength(ranged, outBytes.length - 14);
    expect(ranged.body.equals(outBytes.subarray(7, outBytes.length - 7))).toBe(true);
    // Each node counted its retries.
    const retries = await Promise.all(
      nodes.map(async (n) => {
        let sum = 0;
        for (const [k, v] of parseMetrics(await (await n.api("/metrics")).text())) if (k.startsWith("offpeak_storage_retries_total{")) sum += v;
        return sum;
      }),
    );
    console.log(`two nodes: retries ${JSON.stringify(retries)}; fault proxy so far: ${proxy.stats.requests} calls, ${JSON.stringify(proxy.stats.faults)}`);
    expect(retries[0]! + retries[1]!).toBeGreaterThan(0);
  }, SCENARIO_MS);
});

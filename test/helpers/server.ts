// Test harness: a real offpeak server on port 0 with a fresh data dir, either
// in this process (fast) or as a child process (for signals and crashes).
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import OpenAI from "openai";
import { resolveConfig } from "../../src/config";
import { startServer, type RunningServer } from "../../src/server";
import { s3Storage, type TestS3 } from "./s3";
import { startPostgres } from "./postgres";

export const ADMIN_KEY = "sk-op-test-admin-key-0000000000000000000000";

export interface TestServer {
  url: string;
  /** `${url}/api/v1` */
  base: string;
  dataDir: string;
  /** Where its files are when they are in a bucket (OFFPEAK_TEST_STORAGE=s3 or `storage: "s3"`): null on local disk. */
  storage: { url: string; prefix: string; env: Record<string, string>; s3: TestS3 } | null;
  server: RunningServer;
  admin: string;
  /** An official SDK client for `key` (admin by default). */
  sdk(key?: string): OpenAI;
  /** fetch against the base with a bearer key (admin by default; null for none). */
  api(path: string, init?: RequestInit & { key?: string | null }): Promise<Response>;
  /** Creates a key through the API and returns its secret. */
  createKey(body: { name?: string; scopes?: string[]; project?: string }): Promise<string>;
  stop(): Promise<void>;
}

export function freshDataDir(): string {
  return mkdtempSync(join(tmpdir(), "offpeak-test-"));
}

/**
 * `storage`: "s3" puts the server's files in a prefix of its own (its data dir's name) in a bucket on a
 * real S3-compatible server (./s3.ts); the default is the local disk, or S3
 * when the environment says OFFPEAK_TEST_STORAGE=s3 (to run a whole suite
 * against the bucket). An explicit `--storage-url` in `argv` wins.
 */
/**
 * `database`: "postgres" gives the server a fresh database of its own on the
 * test process's Postgres (./postgres.ts); the default is SQLite in the data
 * dir, or Postgres when OFFPEAK_TEST_DATABASE=postgres (to run a whole suite
 * against it). An explicit `--database-url` in `argv` wins.
 */
export async function testDatabaseArgs(dataDir: string, argv: string[] = [], database?: "sqlite" | "postgres"): Promise<string[]> {
  const want = database ?? (process.env.OFFPEAK_TEST_DATABASE === "postgres" ? "postgres" : "sqlite");
  if (want !== "postgres" || argv.some((a) => a.startsWith("--database-url"))) return [];
  // One database per data dir: a server restarted on the same data dir finds its records again.
  let url = databases.get(dataDir);
  if (!url) databases.set(dataDir, (url = (await startPostgres()).createDatabase()));
  return ["--database-url", await url];
}
const databases = new Map<string, Promise<string>>();

/**
 * For a server started as a child process (./child.ts) on `dataDir`: the
 * `serve` flags and environment that put it where startTestServer would, as
 * the environment says (OFFPEAK_TEST_DATABASE=postgres: its database;
 * OFFPEAK_TEST_STORAGE=s3: its prefix in the bucket, named after the data dir).
 * The same data dir gets the same database and prefix, so a restart finds
 * its records and files again.
 */
export async function testServeArgs(dataDir: string): Promise<{ args: string[]; env: Record<string, string> }> {
  const args = await testDatabaseArgs(dataDir);
  if (process.env.OFFPEAK_TEST_STORAGE !== "s3") return { args, env: frontThreads() };
  const st = await s3Storage(basename(dataDir));
  return { args: [...args, "--storage-url", st.url], env: { ...frontThreads(), ...st.env } };
}

/**
 * Front threads for a test server: OFFPEAK_TEST_HTTP_THREADS=N (the s3 mode
 * of scripts/test-all.ts sets 1), else none, whatever the machine's cores
 * (the default starts at 8): the suite runs the same on every machine.
 */
const frontThreads = (): Record<string, string> => ({ OFFPEAK_HTTP_THREADS: process.env.OFFPEAK_TEST_HTTP_THREADS || "0" });

export async function startTestServer(
  opts: {
    env?: Record<string, string>;
    argv?: string[];
    dataDir?: string;
    storage?: "file" | "s3";
    database?: "sqlite" | "postgres";
    /** The webhook sender's clock (ms): for its 72 h give-up without the wait. */
    webhookClock?: () => number;
  } = {},
): Promise<TestServer> {
  const dataDir = opts.dataDir ?? freshDataDir();
  const dbArgs = await testDatabaseArgs(dataDir, opts.argv, opts.database);
  const wantS3 = (opts.storage ?? (process.env.OFFPEAK_TEST_STORAGE === "s3" ? "s3" : "file")) === "s3";
  const storage = wantS3 && !(opts.argv ?? []).some((a) => a.startsWith("--storage-url")) ? await s3Storage(basename(dataDir)) : null;
  const config = resolveConfig(["--port", "0", "--data-dir", dataDir, ...(storage ? ["--storage-url", storage.url] : []), ...dbArgs, ...(opts.argv ?? [])], {
    OFFPEAK_ADMIN_KEY: ADMIN_KEY,
    OFFPEAK_LOG_LEVEL: "error",
    ...frontThreads(),
    ...storage?.env,
    ...opts.env,
  });
  const server = await startServer(config, { quiet: true, webhookClock: opts.webhookClock });
  const url = server.url;
  const base = `${url}/api/v1`;
  const api = (path: string, init: RequestInit & { key?: string | null } = {}) => {
    const { key = ADMIN_KEY, ...rest } = init;
    const headers = new Headers(rest.headers);
    if (key !== null) headers.set("authorization", `Bearer ${key}`);
    return fetch(base + path, { ...rest, headers });
  };
  return {
    url,
    base,
    dataDir,
    storage,
    server,
    admin: ADMIN_KEY,
    sdk: (key = ADMIN_KEY) => new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 }),
    api,
    async createKey(body) {
      const res = await api("/keys", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "test", ...body }) });
      if (res.status !== 200) throw new Error(`createKey: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { key: string }).key;
    },
    async stop() {
      await server.stop();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * What the server has stored, by name: on the local disk the entries of
 * files/ and tmp/; in a bucket (once removals in the background are done)
 * the objects under its prefix and the bucket work still pending. For
 * "a rejected request stores nothing" checks that hold for both.
 */
export async function storedBlobs(t: TestServer): Promise<string[]> {
  const ls = (dir: string) => readdirSync(join(t.dataDir, dir)).map((n) => `${dir}/${n}`);
  if (!t.storage) return [...ls("files"), ...ls("tmp")].sort();
  await t.server.ctx.store.settled();
  const keys = (await t.storage.s3.keys(`${t.storage.prefix}/`)).map((k) => `s3:${k}`);
  return [...keys, ...ls("tmp"), ...ls("s3-pending")].sort();
}

/** A JSONL batch line for the built-in echo model. */
export function chatLine(customId: string, text = `hello ${customId}`, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    custom_id: customId,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: "offpeak-echo", messages: [{ role: "user", content: text }], ...extra },
  });
}

/** Uploads `text` as a file through multipart and returns the raw response. */
export function uploadRaw(t: TestServer, text: string | Uint8Array, purpose = "batch", filename = "input.jsonl", key?: string | null): Promise<Response> {
  const form = new FormData();
  form.append("purpose", purpose);
  form.append("file", new Blob([text]), filename);
  return t.api("/files", { method: "POST", body: form, key });
}

/**
 * `offpeak serve` is ready when its banner (src/banner.ts, on stdout) says
 * where the API is: group 1 is the server's origin (http://127.0.0.1:PORT).
 */
export const SERVE_READY = /API base\s+(http:\/\/\S+?)\/api\/v1\b/;

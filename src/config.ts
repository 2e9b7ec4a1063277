// Configuration is resolved exactly once, at start, in the order
// flag > environment > config file > default, and then passed down as a plain
// object. Nothing reads the environment at request time, and nothing but
// this module reads process.env (test/config-flags.test.ts). The few
// settings needed where no Config reaches are handed on from here: the main
// thread's durability switch and test hooks are set when this module loads,
// a batch Worker's come in its init message (src/threadSettings.ts), and
// the allocator's re-exec reads processEnv() before anything else runs.
// Flags are read by src/flags.ts, the client commands' parser too.
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import type { DatabaseConfig } from "./db/client";
import type { S3Settings } from "./storage/locator";
import { parseAllowedHosts } from "./net/allowedHosts";
import { PeakCalendar, type PeakWindow } from "./scheduling/order";
import { defaultBatchWorkers, defaultHttpThreads, defaultValidationWorkers, DEFAULT_MAX_JSON_BYTES, usableCores } from "./defaults";
import { setThreadSettings, threadSettingsOf, type ThreadSettings } from "./threadSettings";
import { parseFlags, type FlagSpec, type ParsedFlags } from "./flags";
import { replicaId } from "./inference/replicas/replicaId";

export type Env = Record<string, string | undefined>;

export { defaultHttpThreads } from "./defaults";

/** This process's environment: the one place it is read. */
export const processEnv = (): Env => process.env;

// The main thread's own settings (flushes, test hooks), from the environment, once.
if (Bun.isMainThread) setThreadSettings(threadSettingsOf(process.env, true));

/** What a batch Worker is to hold for itself (its init message carries it: batches/pool.ts). */
export const workerThreadSettings = (env: Env = processEnv()): ThreadSettings => threadSettingsOf(env, false);

const Pricing = Type.Object(
  {
    input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
    output_per_million: Type.Optional(Type.Number({ minimum: 0 })),
  },
  { additionalProperties: false },
);

/** A fixed number of requests at once, or "auto": found while running, up to max_concurrency_limit (docs/CONTRACT.md §18; src/inference/admission/adaptive.ts). */
const MaxConcurrency = Type.Union([Type.Integer({ minimum: 1 }), Type.Literal("auto")]);

/** One engine of an upstream (docs/CONTRACT.md §21): each has its own limit, health and counters. */
const ReplicaFile = Type.Object(
  {
    base_url: Type.String({ minLength: 1 }),
    weight: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
    max_concurrency: Type.Optional(MaxConcurrency),
    resolve: Type.Optional(Type.Literal("dns")),
  },
  { additionalProperties: false },
);

const UpstreamFile = Type.Object(
  {
    name: Type.String({ minLength: 1 }),
    /** One more replica (the only one when `replicas` is absent). */
    base_url: Type.Optional(Type.String({ minLength: 1 })),
    replicas: Type.Optional(Type.Array(ReplicaFile)),
    engine: Type.Optional(Type.Union(["vllm", "sglang", "llamacpp", "ollama", "openai"].map((e) => Type.Literal(e)))),
    /** Sent as `priority` on batch lines only (engines with priority scheduling). */
    batch_priority: Type.Optional(Type.Integer()),
    /**
     * The API the upstream speaks (docs/CONTRACT.md §22): "openai" (the
     * default) or "anthropic", which serves POST /messages itself: Messages
     * requests for its models pass through, other inference routes refuse them.
     */
    api: Type.Optional(Type.Union([Type.Literal("openai"), Type.Literal("anthropic")])),
    api_key_env: Type.Optional(Type.String()),
    models: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    model_map: Type.Optional(Type.Record(Type.String(), Type.String())),
    max_concurrency: Type.Optional(MaxConcurrency),
    max_concurrency_limit: Type.Optional(Type.Integer({ minimum: 1 })),
    queue_size: Type.Optional(Type.Integer({ minimum: 0 })),
    timeout_s: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  },
  { additionalProperties: false },
);

const ModelFile = Type.Object(
  {
    latency_ms: Type.Optional(Type.Number({ minimum: 0 })),
    tokens_per_second: Type.Optional(Type.Number({ minimum: 0 })),
    max_concurrency: Type.Optional(MaxConcurrency),
    max_concurrency_limit: Type.Optional(Type.Integer({ minimum: 1 })),
    queue_size: Type.Optional(Type.Integer({ minimum: 0 })),
    pricing: Type.Optional(Pricing),
  },
  { additionalProperties: false },
);

export const ConfigFile = Type.Object(
  {
    server: Type.Optional(
      Type.Object(
        {
          port: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535 })),
          host: Type.Optional(Type.String()),
          data_dir: Type.Optional(Type.String()),
          log_level: Type.Optional(Type.Union([Type.Literal("debug"), Type.Literal("info"), Type.Literal("warn"), Type.Literal("error")])),
          log_client_address: Type.Optional(Type.Union([Type.Literal("unauthenticated"), Type.Literal("always")])),
          upstream_client: Type.Optional(Type.Union([Type.Literal("builtin"), Type.Literal("fetch")])),
          http_threads: Type.Optional(Type.Integer({ minimum: 0, maximum: 32 })),
          sse_keepalive_ms: Type.Optional(Type.Integer({ minimum: 100, maximum: 300_000 })),
        },
        { additionalProperties: false },
      ),
    ),
    limits: Type.Optional(
      Type.Object(
        {
          max_file_bytes: Type.Optional(Type.Integer({ minimum: 1 })),
          max_batch_lines: Type.Optional(Type.Integer({ minimum: 1 })),
          duplicate_check_bytes: Type.Optional(Type.Integer({ minimum: 8192 })),
          upload_validation_workers: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
          max_json_bytes: Type.Optional(Type.Integer({ minimum: 1024 })),
          max_concurrent_uploads: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
          max_concurrent_uploads_per_key: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
          upload_idle_timeout_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
          rpm: Type.Optional(Type.Integer({ minimum: 1 })),
          tpm: Type.Optional(Type.Integer({ minimum: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    batches: Type.Optional(
      Type.Object(
        {
          workers: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
          max_attempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 20 })),
          retry_base_ms: Type.Optional(Type.Integer({ minimum: 1 })),
          lease_ms: Type.Optional(Type.Integer({ minimum: 1000 })),
          /** docs/CONTRACT.md §18 off-peak hours: when batches with a window of 24h or more are held to peak_share of a model's concurrency. */
          peak_hours: Type.Optional(Type.Array(Type.Object({ days: Type.String(), from: Type.String(), to: Type.String(), tz: Type.String() }, { additionalProperties: false }))),
          peak_share: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    storage: Type.Optional(Type.Object({ url: Type.Optional(Type.String()) }, { additionalProperties: false })),
    database: Type.Optional(Type.Object({ url: Type.Optional(Type.String()), start_wait_s: Type.Optional(Type.Integer({ minimum: 0 })) }, { additionalProperties: false })),
    upstreams: Type.Optional(Type.Array(UpstreamFile)),
    models: Type.Optional(Type.Record(Type.String(), ModelFile)),
    webhooks: Type.Optional(Type.Object({ allowed_hosts: Type.Optional(Type.Array(Type.String())) }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);
export type ConfigFile = Static<typeof ConfigFile>;
/** A replica as resolved at start: its stable id (src/inference/replicas/replicaId.ts) and its URL without a trailing slash. */
export interface ReplicaConfig {
  id: string;
  base_url: string;
  weight: number;
  max_concurrency?: number | "auto";
  resolve?: "dns";
}
/** `base_url` is the first replica's (what a single-engine upstream has always had); `replicas` lists them all. */
export type UpstreamApi = "openai" | "anthropic";
export type UpstreamConfig = Omit<Static<typeof UpstreamFile>, "base_url" | "replicas" | "api"> & { base_url: string; replicas: ReplicaConfig[]; api_key: string | null; api: UpstreamApi };
export type ModelConfig = Static<typeof ModelFile>;

export type LogLevel = "debug" | "info" | "warn" | "error";

/** Where file bytes live (storage.url): `file:` = <data_dir>/files; `s3://BUCKET[/PREFIX]` = objects in a bucket. */
export type StorageConfig = { kind: "file" } | { kind: "s3"; url: string; s3: S3Settings; prefix: string };

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  configPath: string | null;
  storage: StorageConfig;
  /** This node's name in node ids and lease owners (OFFPEAK_NODE_NAME; default: the host's name). Nodes of one machine share it. */
  nodeName: string;
  /** Where records live (database.url): SQLite in the data dir, or Postgres. */
  database: DatabaseConfig;
  /** How long a server waits for a Postgres that does not answer at start before it gives up (database.start_wait_s, OFFPEAK_DATABASE_START_WAIT_S; default 300 s). */
  databaseStartWaitMs: number;
  maxFileBytes: number;
  maxBatchLines: number;
  /** Memory an upload's custom_id duplicate check may use before it spills fingerprints to <dataDir>/tmp (src/jsonl/duplicateFinder.ts). */
  duplicateCheckBytes: number;
  /** Scanner Workers that check an upload's lines (it uses one more, its duplicate finder): src/defaults.ts defaultValidationWorkers. */
  uploadValidationWorkers: number;
  /** Largest JSON request body read (413 request_too_large above; src/http/jsonBody.ts). */
  maxJsonBytes: number;
  /** Uploads (POST /files) streaming at once on this server, and per key; more are answered 429 (src/files/uploadSlots.ts). */
  maxConcurrentUploads: number;
  maxConcurrentUploadsPerKey: number;
  /** An upload whose client sends no byte for this long is ended with 408 (src/http/idleReader.ts). */
  uploadIdleTimeoutS: number;
  logLevel: LogLevel;
  /**
   * Which request lines carry the peer's address (`client`): those without
   * a valid key (the address is all there is to say who sent them), or every
   * line. Bun asks the socket for it on each call (a getpeername), ≈2 µs and
   * 5% of the HTTP thread in the chat pass-through; on a keyed line the key
   * already says who sent it.
   */
  logClientAddress: "unauthenticated" | "always";
  /**
   * How interactive requests reach plain-http upstreams: offpeak's own
   * HTTP/1.1 client (src/inference/upstream/httpClient.ts, the default) or Bun's
   * fetch. https upstreams, and any when HTTP_PROXY is set, always use fetch.
   */
  upstreamClient: "builtin" | "fetch";
  /**
   * Front threads: threads besides the main one that serve HTTP on the same
   * port and do chat completions' pass-through work (src/http/front).
   * Default: none, on any machine (defaultHttpThreads; docs/OPERATING.md
   * "HTTP threads").
   */
  httpThreads: number;
  /**
   * BUN_CONFIG_MAX_HTTP_REQUESTS as this process started with it (Bun's
   * default 256): how many fetches run at once in the process. `serve`
   * raises it (src/allocator.ts); front threads relay every request with
   * one, so they warn when it was left low.
   */
  fetchConcurrency: number;
  /** Quiet time after which a chat-session SSE stream sends a `: keep-alive` comment (proxies drop idle streams). */
  sseKeepAliveMs: number;
  /** Exact admin key from OFFPEAK_ADMIN_KEY, if set. */
  adminKey: string | null;
  /** Default per-key limits when a key sets none (null: unlimited). */
  defaultRpm: number | null;
  defaultTpm: number | null;
  /** Length of one "minute" of rpm/tpm in seconds: 60, shortened only by tests of the cluster's limits. */
  rateLimitMinuteSeconds: number;
  batches: {
    /** Batch Worker threads. Default: one per usable core, at most 8 (src/defaults.ts defaultBatchWorkers; docs/OPERATING.md "Batch Workers"). */
    workers: number;
    maxAttempts: number;
    retryBaseMs: number;
    leaseMs: number;
    /** Length of one "h" of completion_window in seconds: 3600, shortened only by tests of expiry. */
    hourSeconds: number;
    /** batches.peak_hours (checked at start: days, HH:MM, IANA tz). */
    peakHours: PeakWindow[];
    /** batches.peak_share: 0–1, 1 = no cap. */
    peakShare: number;
  };
  upstreams: UpstreamConfig[];
  models: Record<string, ModelConfig>;
  /** The first webhook retry's delay (ms; later ones scale with it): 5000, shortened only by tests. */
  webhookRetryBaseMs: number;
  /** webhooks.allowed_hosts: host names, `*.name`s, IPs and CIDRs webhooks may reach although internal (src/webhooks/egress.ts). */
  webhookAllowedHosts: string[];
}

export class ConfigError extends Error {}

/** batches.peak_hours, checked now: a bad day, time or time zone stops the start with a precise message. */
function peakHoursOf(windows: PeakWindow[] | undefined): PeakWindow[] {
  if (!windows) return [];
  try {
    new PeakCalendar(windows);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  return windows;
}

/** The flags `serve` takes. */
export const SERVER_FLAGS: FlagSpec = {
  config: "string",
  "data-dir": "string",
  host: "string",
  "log-level": "string",
  "max-batch-lines": "string",
  "max-file-bytes": "string",
  "max-json-bytes": "string",
  "max-concurrent-uploads": "string",
  "max-concurrent-uploads-per-key": "string",
  "upload-idle-timeout-s": "string",
  port: "string",
  "storage-url": "string",
  "database-url": "string",
  help: "boolean",
};

/** The flags `keys` takes: the server's (it opens the same data dir and database) and its own. */
export const KEYS_FLAGS: FlagSpec = { ...SERVER_FLAGS, name: "string", scopes: "string", project: "string" };

/** `argv` read against `spec`; a flag the command does not take, or a value flag given none, is a ConfigError (exit 2). */
export const serverFlags = (argv: readonly string[], spec: FlagSpec = SERVER_FLAGS): ParsedFlags => parseFlags(argv, spec, (message) => new ConfigError(message));

function intOf(name: string, raw: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function readConfigFile(path: string): ConfigFile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ConfigError(`cannot read config file ${path}: ${(e as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(`config file ${path} is not valid JSON: ${(e as Error).message}`);
  }
  const first = Value.Errors(ConfigFile, json).First();
  if (first) {
    const where = first.path || "/";
    throw new ConfigError(`config file ${path}: ${where}: ${first.message}`);
  }
  return json as ConfigFile;
}

/**
 * storage.url → where bytes go. For S3 the endpoint, region and credentials
 * are read here, once, under the names Bun's S3 client reads (S3_* first,
 * then AWS_*), so Workers and tests get them from the Config, never from
 * the environment.
 */
export function storageOf(url: string, env: Env): StorageConfig {
  const u = url.trim();
  if (u === "file:" || u === "file://" || u === "file") return { kind: "file" };
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(u);
  if (!m) throw new ConfigError(`storage url must be file: or s3://BUCKET[/PREFIX], got "${url}"`);
  const prefix = (m[2] ?? "").replace(/^\/+|\/+$/g, "");
  const first = (...names: string[]) => names.map((n) => env[n]).find((v) => v !== undefined && v !== "");
  const s3: S3Settings = { bucket: m[1]! };
  const endpoint = first("S3_ENDPOINT", "AWS_ENDPOINT");
  const region = first("S3_REGION", "AWS_REGION");
  const accessKeyId = first("S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID");
  const secretAccessKey = first("S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY");
  const sessionToken = first("S3_SESSION_TOKEN", "AWS_SESSION_TOKEN");
  if (endpoint) s3.endpoint = endpoint;
  if (region) s3.region = region;
  if (accessKeyId) s3.accessKeyId = accessKeyId;
  if (secretAccessKey) s3.secretAccessKey = secretAccessKey;
  if (sessionToken) s3.sessionToken = sessionToken;
  return { kind: "s3", url: `s3://${s3.bucket}${prefix ? `/${prefix}` : ""}`, s3, prefix };
}

/** An upstream's replicas (docs/CONTRACT.md §21): `base_url` is one more, listed first; each URL once. */
function upstreamOf(u: Static<typeof UpstreamFile>, apiKey: string | null): UpstreamConfig {
  const listed = [...(u.base_url !== undefined ? [{ base_url: u.base_url }] : []), ...(u.replicas ?? [])];
  if (listed.length === 0) throw new ConfigError(`upstream "${u.name}" needs base_url or replicas`);
  const replicas: ReplicaConfig[] = [];
  for (const r of listed) {
    const base_url = r.base_url.replace(/\/+$/, "");
    try {
      const url = new URL(base_url);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
    } catch {
      throw new ConfigError(`upstream "${u.name}": base_url must be an http(s) URL, got "${r.base_url}"`);
    }
    if (replicas.some((x) => x.base_url === base_url)) throw new ConfigError(`upstream "${u.name}" lists ${base_url} twice`);
    replicas.push({ id: replicaId(u.name, base_url), base_url, weight: ("weight" in r && r.weight) || 1, max_concurrency: "max_concurrency" in r ? r.max_concurrency : undefined, resolve: "resolve" in r ? r.resolve : undefined });
  }
  const { replicas: _listed, base_url: _first, ...rest } = u;
  return { ...rest, api: u.api ?? "openai", base_url: replicas[0]!.base_url, replicas, api_key: apiKey };
}

/**
 * database.url → where records go: `sqlite:` (<data_dir>/offpeak.db),
 * `sqlite:PATH`, or `postgres://…` / `postgresql://…` (docs/CONTRACT.md §14), with
 * OFFPEAK_PG_POOL connections at most (checked only for Postgres).
 */
export function databaseOf(url: string, dataDir: string, pgPool?: string): DatabaseConfig {
  const u = url.trim();
  if (/^postgres(ql)?:\/\//.test(u)) {
    const pool = intOf("OFFPEAK_PG_POOL", pgPool, 1);
    return pool === undefined ? { kind: "postgres", url: u } : { kind: "postgres", url: u, pool };
  }
  const m = /^sqlite:(?:\/\/)?(.*)$/.exec(u);
  if (!m) throw new ConfigError(`database url must be sqlite: or postgres://…, got "${url.replace(/:[^:@/]*@/, ":***@")}"`);
  return { kind: "sqlite", path: m[1] ? resolve(m[1]) : join(dataDir, "offpeak.db") };
}

/** OFFPEAK_WEBHOOK_ALLOWED_HOSTS (comma-separated) or webhooks.allowed_hosts, checked here so a typo stops the start. */
function webhookAllowedHostsOf(raw: string | string[] | undefined): string[] {
  const entries = (typeof raw === "string" ? raw.split(",") : (raw ?? [])).map((s) => s.trim()).filter(Boolean);
  try {
    parseAllowedHosts(entries);
  } catch (e) {
    throw new ConfigError(`webhooks.allowed_hosts: ${(e as Error).message}`);
  }
  return entries;
}

const DEFAULTS = {
  port: 8080,
  host: "127.0.0.1",
  dataDir: "./data",
  maxFileBytes: 8 * 1024 ** 3,
  maxBatchLines: 10_000_000,
  /** 4 MiB: up to 367K ids checked in memory, more spill to <dataDir>/tmp (src/jsonl/duplicateFinder.ts; BENCHMARKS.md "Upload"). */
  duplicateCheckBytes: 4 << 20,
  maxJsonBytes: DEFAULT_MAX_JSON_BYTES,
  maxConcurrentUploads: 16,
  maxConcurrentUploadsPerKey: 4,
  uploadIdleTimeoutS: 60,
};

/**
 * The server's Config from its command line (read against `spec`: a flag it
 * does not take stops the start) and environment.
 */
export function resolveConfig(argv: readonly string[], env: Env = processEnv(), spec: FlagSpec = SERVER_FLAGS): Config {
  const { flags } = serverFlags(argv, spec);
  const configPath = flags["config"] ?? env.OFFPEAK_CONFIG ?? null;
  const file: ConfigFile = configPath ? readConfigFile(configPath) : {};

  const pick = <T>(...values: (T | undefined)[]): T | undefined => values.find((v) => v !== undefined);

  const upstreams: UpstreamConfig[] = (file.upstreams ?? []).map((u) => upstreamOf(u, u.api_key_env ? env[u.api_key_env] || null : null));
  if (env.OFFPEAK_UPSTREAM_URL) upstreams.push(upstreamOf({ name: "upstream", base_url: env.OFFPEAK_UPSTREAM_URL }, env.OFFPEAK_UPSTREAM_KEY || null));
  const names = new Set<string>();
  for (const u of upstreams) {
    if (names.has(u.name)) throw new ConfigError(`two upstreams are named "${u.name}"`);
    names.add(u.name);
  }

  const logLevel = (flags["log-level"] ?? env.OFFPEAK_LOG_LEVEL ?? file.server?.log_level ?? "info") as LogLevel;
  if (!["debug", "info", "warn", "error"].includes(logLevel)) throw new ConfigError(`log level must be debug|info|warn|error, got "${logLevel}"`);

  const logClientAddress = env.OFFPEAK_LOG_CLIENT_ADDRESS || file.server?.log_client_address || "unauthenticated";
  if (logClientAddress !== "unauthenticated" && logClientAddress !== "always")
    throw new ConfigError(`OFFPEAK_LOG_CLIENT_ADDRESS must be unauthenticated|always, got "${logClientAddress}"`);

  const upstreamClient = env.OFFPEAK_UPSTREAM_CLIENT || file.server?.upstream_client || "builtin";
  if (upstreamClient !== "builtin" && upstreamClient !== "fetch") throw new ConfigError(`OFFPEAK_UPSTREAM_CLIENT must be builtin|fetch, got "${upstreamClient}"`);

  const dataDir = pick(flags["data-dir"], env.OFFPEAK_DATA_DIR, file.server?.data_dir) ?? DEFAULTS.dataDir;
  return {
    port: pick(intOf("--port", flags["port"], 0, 65535), intOf("PORT", env.PORT, 0, 65535), file.server?.port) ?? DEFAULTS.port,
    host: pick(flags["host"], env.HOST, file.server?.host) ?? DEFAULTS.host,
    dataDir: resolve(dataDir),
    configPath,
    nodeName: env.OFFPEAK_NODE_NAME || hostname(),
    database: databaseOf(pick(flags["database-url"], env.OFFPEAK_DATABASE_URL, file.database?.url) ?? "sqlite:", resolve(dataDir), env.OFFPEAK_PG_POOL),
    databaseStartWaitMs: (pick(intOf("OFFPEAK_DATABASE_START_WAIT_S", env.OFFPEAK_DATABASE_START_WAIT_S, 0), file.database?.start_wait_s) ?? 300) * 1000,
    storage: storageOf(pick(flags["storage-url"], env.OFFPEAK_STORAGE_URL, file.storage?.url) ?? "file:", env),
    maxFileBytes:
      pick(intOf("--max-file-bytes", flags["max-file-bytes"], 1), intOf("OFFPEAK_MAX_FILE_BYTES", env.OFFPEAK_MAX_FILE_BYTES, 1), file.limits?.max_file_bytes) ??
      DEFAULTS.maxFileBytes,
    maxBatchLines:
      pick(intOf("--max-batch-lines", flags["max-batch-lines"], 1), intOf("OFFPEAK_MAX_BATCH_LINES", env.OFFPEAK_MAX_BATCH_LINES, 1), file.limits?.max_batch_lines) ??
      DEFAULTS.maxBatchLines,
    duplicateCheckBytes:
      pick(intOf("OFFPEAK_DUPLICATE_CHECK_BYTES", env.OFFPEAK_DUPLICATE_CHECK_BYTES, 8192), file.limits?.duplicate_check_bytes) ?? DEFAULTS.duplicateCheckBytes,
    uploadValidationWorkers:
      pick(intOf("OFFPEAK_UPLOAD_VALIDATION_WORKERS", env.OFFPEAK_UPLOAD_VALIDATION_WORKERS, 1, 64), file.limits?.upload_validation_workers) ?? defaultValidationWorkers(usableCores()),
    maxJsonBytes:
      pick(intOf("--max-json-bytes", flags["max-json-bytes"], 1024), intOf("OFFPEAK_MAX_JSON_BYTES", env.OFFPEAK_MAX_JSON_BYTES, 1024), file.limits?.max_json_bytes) ??
      DEFAULTS.maxJsonBytes,
    maxConcurrentUploads:
      pick(
        intOf("--max-concurrent-uploads", flags["max-concurrent-uploads"], 1, 100_000),
        intOf("OFFPEAK_MAX_CONCURRENT_UPLOADS", env.OFFPEAK_MAX_CONCURRENT_UPLOADS, 1, 100_000),
        file.limits?.max_concurrent_uploads,
      ) ?? DEFAULTS.maxConcurrentUploads,
    maxConcurrentUploadsPerKey:
      pick(
        intOf("--max-concurrent-uploads-per-key", flags["max-concurrent-uploads-per-key"], 1, 100_000),
        intOf("OFFPEAK_MAX_CONCURRENT_UPLOADS_PER_KEY", env.OFFPEAK_MAX_CONCURRENT_UPLOADS_PER_KEY, 1, 100_000),
        file.limits?.max_concurrent_uploads_per_key,
      ) ?? DEFAULTS.maxConcurrentUploadsPerKey,
    uploadIdleTimeoutS:
      pick(
        intOf("--upload-idle-timeout-s", flags["upload-idle-timeout-s"], 1, 3600),
        intOf("OFFPEAK_UPLOAD_IDLE_TIMEOUT_S", env.OFFPEAK_UPLOAD_IDLE_TIMEOUT_S, 1, 3600),
        file.limits?.upload_idle_timeout_s,
      ) ?? DEFAULTS.uploadIdleTimeoutS,
    logLevel,
    logClientAddress,
    upstreamClient,
    httpThreads: pick(intOf("OFFPEAK_HTTP_THREADS", env.OFFPEAK_HTTP_THREADS, 0, 32), file.server?.http_threads) ?? defaultHttpThreads(usableCores()),
    fetchConcurrency: Number(env.BUN_CONFIG_MAX_HTTP_REQUESTS) || 256,
    sseKeepAliveMs: pick(intOf("OFFPEAK_SSE_KEEPALIVE_MS", env.OFFPEAK_SSE_KEEPALIVE_MS, 100, 300_000), file.server?.sse_keepalive_ms) ?? 15_000,
    adminKey: env.OFFPEAK_ADMIN_KEY || null,
    defaultRpm: pick(intOf("OFFPEAK_RPM", env.OFFPEAK_RPM, 1), file.limits?.rpm) ?? null,
    defaultTpm: pick(intOf("OFFPEAK_TPM", env.OFFPEAK_TPM, 1), file.limits?.tpm) ?? null,
    rateLimitMinuteSeconds: intOf("OFFPEAK_RATE_LIMIT_MINUTE_SECONDS", env.OFFPEAK_RATE_LIMIT_MINUTE_SECONDS, 1, 60) ?? 60,
    batches: {
      workers: pick(intOf("OFFPEAK_BATCH_WORKERS", env.OFFPEAK_BATCH_WORKERS, 0, 64), file.batches?.workers) ?? defaultBatchWorkers(usableCores()),
      maxAttempts: pick(intOf("OFFPEAK_BATCH_MAX_ATTEMPTS", env.OFFPEAK_BATCH_MAX_ATTEMPTS, 1, 20), file.batches?.max_attempts) ?? 10,
      retryBaseMs: pick(intOf("OFFPEAK_BATCH_RETRY_BASE_MS", env.OFFPEAK_BATCH_RETRY_BASE_MS, 1), file.batches?.retry_base_ms) ?? 500,
      leaseMs: pick(intOf("OFFPEAK_BATCH_LEASE_MS", env.OFFPEAK_BATCH_LEASE_MS, 1000), file.batches?.lease_ms) ?? 30_000,
      hourSeconds: intOf("OFFPEAK_BATCH_HOUR_SECONDS", env.OFFPEAK_BATCH_HOUR_SECONDS, 1, 3600) ?? 3600,
      peakHours: peakHoursOf(file.batches?.peak_hours),
      peakShare: file.batches?.peak_share ?? 1,
    },
    upstreams,
    models: file.models ?? {},
    webhookRetryBaseMs: intOf("OFFPEAK_WEBHOOK_RETRY_BASE_MS", env.OFFPEAK_WEBHOOK_RETRY_BASE_MS, 1, 5000) ?? 5000,
    webhookAllowedHosts: webhookAllowedHostsOf(env.OFFPEAK_WEBHOOK_ALLOWED_HOSTS ?? file.webhooks?.allowed_hosts),
  };
}

/** What the client commands (src/cli/) take from the environment where no flag says. */
export interface ClientEnv {
  /** OFFPEAK_BASE_URL, else the server on this machine at PORT as the server itself reads it (so a container that sets PORT needs nothing more). */
  baseUrl: string;
  /** OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY (handy inside the server's own container). */
  apiKey: string | undefined;
  /** `healthcheck`'s URL: /healthz of the server on this machine at PORT. */
  healthUrl: string;
}

export function clientEnv(env: Env = processEnv()): ClientEnv {
  const local = `http://127.0.0.1:${env.PORT || DEFAULTS.port}`;
  return {
    baseUrl: env.OFFPEAK_BASE_URL || `${local}/v1`,
    apiKey: env.OFFPEAK_API_KEY || env.OFFPEAK_ADMIN_KEY || undefined,
    healthUrl: `${local}/healthz`,
  };
}

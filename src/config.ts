// Configuration is resolved exactly once, at start, in the order
// flag > environment > config file > default, and then passed down as a plain
// object. Nothing reads the environment at request time, and nothing but
// this module reads process.env (test/config-flags.test.ts). The few
// settings needed where no Config reaches are handed on from here: the main
// thread's durability switch and test hooks are set when this module loads,
// a batch Worker's come in its init message (src/threadSettings.ts), and
// the allocator's re-exec reads processEnv() before anything else runs.
// Flags are read by src/flags.ts, the client commands' parser too.
//
// Each setting is declared once, in ./config/settings.ts: the config file's
// schema, the Config's fields, their resolution and the docs' tables come
// from there. Written out here: the config file's upstreams and models
// (lists of objects), and what is made of a few settings (the storage, the
// database, the upstream of OFFPEAK_UPSTREAM_URL). Knobs only tests set are
// read by ./config/testKnobs.ts.
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { DatabaseConfig } from "./db/client";
import type { S3Settings } from "./storage/locator";
import { setThreadSettings, threadSettingsOf, type ThreadSettings } from "./threadSettings";
import { parseFlags, type FlagSpec, type ParsedFlags } from "./flags";
import { replicaId } from "./inference/replicas/replicaId";
import { ConfigError, fileSections, intOf, resolveSettings, settingsOf, settingValue, type Env, type SettingValues } from "./config/setting";
import { SETTINGS } from "./config/settings";
import { testKnobsOf } from "./config/testKnobs";

export { ConfigError, type Env };

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

/** The config file: the settings' sections (./config/settings.ts), and the upstreams and models, written out here. */
export const ConfigFile = Type.Object(
  {
    ...fileSections(SETTINGS),
    upstreams: Type.Optional(Type.Array(UpstreamFile)),
    models: Type.Optional(Type.Record(Type.String(), ModelFile)),
  },
  { additionalProperties: false },
);
export type ConfigFile = {
  upstreams?: Static<typeof UpstreamFile>[];
  models?: Record<string, ModelConfig>;
  /** The settings' sections (`server`, `limits`, …), read by the table's resolver. */
  [section: string]: unknown;
};
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

/** Where file bytes live (storage.url): `file:` = <data_dir>/files; `s3://BUCKET[/PREFIX]` = objects in a bucket. */
export type StorageConfig = { kind: "file" } | { kind: "s3"; url: string; s3: S3Settings; prefix: string };

type Settings = SettingValues<typeof SETTINGS>;
/** Settings read to make other parts of the Config: the storage, the database, one more upstream. */
type Inputs = "storageUrl" | "databaseUrl" | "pgPool" | "upstreamUrl" | "upstreamKey";

/**
 * The server's configuration, as resolved at start: each setting of
 * ./config/settings.ts (which says what each is), and what is made of the
 * config file's upstreams and models, the test knobs (./config/testKnobs.ts)
 * and what Bun was started with.
 */
export type Config = Omit<Settings, Inputs | "batches"> & {
  /** Where records live (database.url): SQLite in the data dir, or Postgres. */
  database: DatabaseConfig;
  storage: StorageConfig;
  upstreams: UpstreamConfig[];
  models: Record<string, ModelConfig>;
  batches: Settings["batches"] & {
    /** Length of one "h" of completion_window in seconds: 3600, shortened only by tests of expiry. */
    hourSeconds: number;
  };
  /** Length of one "minute" of rpm/tpm in seconds: 60, shortened only by tests of the cluster's limits. */
  rateLimitMinuteSeconds: number;
  /** The first webhook retry's delay (ms; later ones scale with it): 5000, shortened only by tests. */
  webhookRetryBaseMs: number;
  /**
   * BUN_CONFIG_MAX_HTTP_REQUESTS as this process started with it (Bun's
   * default 256): how many fetches run at once in the process. `serve`
   * raises it (src/allocator.ts); front threads relay every request with
   * one, so they warn when it was left low.
   */
  fetchConcurrency: number;
};

export type LogLevel = Config["logLevel"];

/** The flags `serve` takes: the settings' (./config/settings.ts), and --help. */
export const SERVER_FLAGS: FlagSpec = {
  ...Object.fromEntries(settingsOf(SETTINGS).flatMap((s) => (s.kind !== "external" && s.flag ? [[s.flag, "string" as const]] : []))),
  help: "boolean",
};

/** The flags `keys` takes: the server's (it opens the same data dir and database) and its own. */
export const KEYS_FLAGS: FlagSpec = { ...SERVER_FLAGS, name: "string", scopes: "string", project: "string" };

/** `argv` read against `spec`; a flag the command does not take, or a value flag given none, is a ConfigError (exit 2). */
export const serverFlags = (argv: readonly string[], spec: FlagSpec = SERVER_FLAGS): ParsedFlags => parseFlags(argv, spec, (message) => new ConfigError(message));

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

/**
 * The server's Config from its command line (read against `spec`: a flag it
 * does not take stops the start) and environment.
 */
export function resolveConfig(argv: readonly string[], env: Env = processEnv(), spec: FlagSpec = SERVER_FLAGS): Config {
  const { flags } = serverFlags(argv, spec);
  const configPath = settingValue(SETTINGS.configPath, { flags, env, file: {} });
  const file: ConfigFile = configPath ? readConfigFile(configPath) : {};
  const { storageUrl, databaseUrl, pgPool, upstreamUrl, upstreamKey, batches, ...settings } = resolveSettings(SETTINGS, { flags, env, file });

  const upstreams: UpstreamConfig[] = (file.upstreams ?? []).map((u) => upstreamOf(u, u.api_key_env ? env[u.api_key_env] || null : null));
  if (upstreamUrl) upstreams.push(upstreamOf({ name: "upstream", base_url: upstreamUrl }, upstreamKey));
  const names = new Set<string>();
  for (const u of upstreams) {
    if (names.has(u.name)) throw new ConfigError(`two upstreams are named "${u.name}"`);
    names.add(u.name);
  }

  const knobs = testKnobsOf(env);
  return {
    ...settings,
    database: databaseOf(databaseUrl, settings.dataDir, pgPool ?? undefined),
    storage: storageOf(storageUrl, env),
    upstreams,
    models: file.models ?? {},
    batches: { ...batches, hourSeconds: knobs.batchHourSeconds },
    rateLimitMinuteSeconds: knobs.rateLimitMinuteSeconds,
    webhookRetryBaseMs: knobs.webhookRetryBaseMs,
    fetchConcurrency: Number(env.BUN_CONFIG_MAX_HTTP_REQUESTS) || 256,
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
  const local = `http://127.0.0.1:${env.PORT || SETTINGS.port.default}`;
  return {
    baseUrl: env.OFFPEAK_BASE_URL || `${local}/v1`,
    apiKey: env.OFFPEAK_API_KEY || env.OFFPEAK_ADMIN_KEY || undefined,
    healthUrl: `${local}/healthz`,
  };
}

// The server's settings, each declared once: its flag, environment variable,
// config-file key, values, default and what it does. The config file's
// schema, the Config's fields, the resolver (flag > environment > config
// file > default) and the settings tables of README.md and
// docs/OPERATING.md come from here (./setting.ts; scripts/settings-docs.ts
// writes the tables, test/settings-docs.test.ts checks them).
//
// Not here: the config file's upstreams and models (lists of objects,
// hand-written in src/config.ts), and knobs only tests set (./testKnobs.ts).
// The order is the docs tables'. A few entries are read here and made into
// something else by src/config.ts (storageUrl → storage, databaseUrl and
// pgPool → database, upstreamUrl and upstreamKey → one more upstream).
import { Type } from "@sinclair/typebox";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { defaultBatchWorkers, defaultHttpThreads, defaultValidationWorkers, DEFAULT_MAX_JSON_BYTES, usableCores } from "../defaults";
import { parseAllowedHosts } from "../net/allowedHosts";
import { PeakCalendar } from "../scheduling/order";
import { choice, ConfigError, external, integer, list, number, shaped, text } from "./setting";

const PeakWindows = Type.Array(Type.Object({ days: Type.String(), from: Type.String(), to: Type.String(), tz: Type.String() }, { additionalProperties: false }));

export const SETTINGS = {
  port: integer({ flag: "port", env: "PORT", file: "server.port", min: 0, max: 65535, default: 8080, defaultDoc: "8080", doc: "listen port (0: any free port)", readme: "listen port (0 = any free port)" }),
  host: text({ flag: "host", env: "HOST", file: "server.host", default: "127.0.0.1", defaultDoc: "127.0.0.1", valuesDoc: "an address", doc: "listen address (`0.0.0.0` for all)", readme: "listen address" }),
  dataDir: text({
    flag: "data-dir",
    env: "OFFPEAK_DATA_DIR",
    file: "server.data_dir",
    default: "./data",
    then: (dir) => resolve(dir),
    defaultDoc: "`./data`",
    valuesDoc: "a path",
    doc: "database and stored files",
    readme: "SQLite database and stored files",
  }),
  configPath: text<string | null>({ flag: "config", env: "OFFPEAK_CONFIG", default: null, defaultDoc: "none", valuesDoc: "a path", doc: "the JSON config file", readme: "JSON config file (unknown keys are rejected)" }),
  storageUrl: text({
    flag: "storage-url",
    env: "OFFPEAK_STORAGE_URL",
    file: "storage.url",
    default: "file:",
    defaultDoc: "`file:`",
    valuesDoc: "`file:`, `s3://BUCKET[/PREFIX]`",
    doc: "where file bytes go: `file:` (`<data_dir>/files`) or `s3://BUCKET[/PREFIX]` (see [Storage on S3](#storage-on-s3))",
    readme:
      'file bytes on the local disk, or in a bucket: `s3://BUCKET[/PREFIX]` with `S3_ENDPOINT`, `S3_REGION`, `S3_ACCESS_KEY_ID`, `S3_SECRET_ACCESS_KEY` (or `AWS_*`); see docs/OPERATING.md "Storage on S3"',
  }),
  databaseUrl: text({
    flag: "database-url",
    env: "OFFPEAK_DATABASE_URL",
    file: "database.url",
    default: "sqlite:",
    defaultDoc: "`sqlite:`",
    valuesDoc: "`sqlite:`, `sqlite:PATH`, `postgres://…`",
    doc: "where records go: `sqlite:` (`<data_dir>/offpeak.db`), `sqlite:PATH`, or `postgres://USER:PASSWORD@HOST:PORT/DB` (see [Running a cluster](#running-a-cluster))",
    readme:
      'records in SQLite in the data dir, or on Postgres (`postgres://…`): several nodes on one Postgres and one bucket form a cluster; see docs/OPERATING.md "Running a cluster" and `compose.cluster.yaml`',
  }),
  databaseStartWaitMs: integer({
    env: "OFFPEAK_DATABASE_START_WAIT_S",
    file: "database.start_wait_s",
    min: 0,
    default: 300,
    then: (s) => s * 1000,
    defaultDoc: "300",
    doc: "seconds a server waits at start for a Postgres that does not answer yet (then it exits, status 1)",
  }),
  /** Checked only for Postgres (src/config.ts databaseOf): SQLite ignores it. */
  pgPool: text<string | null>({ env: "OFFPEAK_PG_POOL", default: null, defaultDoc: "10", valuesDoc: "integer ≥ 1", doc: "Postgres connections a node keeps at most" }),
  nodeName: text({
    env: "OFFPEAK_NODE_NAME",
    blankUnset: true,
    default: () => hostname(),
    defaultDoc: "the host name",
    valuesDoc: "a name",
    doc: "this node's name in node ids and lease owners (`NAME:pid:nonce`); give each machine or container its own",
  }),
  logLevel: choice(["debug", "info", "warn", "error"], {
    flag: "log-level",
    env: "OFFPEAK_LOG_LEVEL",
    file: "server.log_level",
    label: "log level",
    default: "info",
    defaultDoc: "`info`",
    doc: "which log lines are written: this level and the more severe ones",
    readme: "debug, info, warn, error",
  }),
  /**
   * Which request lines carry the peer's address (`client`): those without
   * a valid key (the address is all there is to say who sent them), or every
   * line. Bun asks the socket for it on each call (a getpeername), ≈2 µs and
   * 5% of the HTTP thread in the chat pass-through; on a keyed line the key
   * already says who sent it.
   */
  logClientAddress: choice(["unauthenticated", "always"], {
    env: "OFFPEAK_LOG_CLIENT_ADDRESS",
    file: "server.log_client_address",
    blankUnset: true,
    default: "unauthenticated",
    defaultDoc: "`unauthenticated`",
    doc: "which request lines carry the peer's address (`client`): those without a valid key, or `always` (every line; Bun asks the socket on each call, ≈2 µs a request, see [Logs](#logs))",
    readme: "request lines with the peer's address: those without a valid key, or `always`",
  }),
  /** offpeak's own HTTP/1.1 client is src/inference/upstream/httpClient.ts; https upstreams, and any when HTTP_PROXY is set, always use fetch. */
  upstreamClient: choice(["builtin", "fetch"], {
    env: "OFFPEAK_UPSTREAM_CLIENT",
    file: "server.upstream_client",
    blankUnset: true,
    default: "builtin",
    defaultDoc: "`builtin`",
    doc: "how interactive requests reach plain-http upstreams: offpeak's own HTTP/1.1 client, or `fetch` (see [Upstreams](#upstreams)); https upstreams always use fetch",
    readme: "interactive calls to plain-http upstreams through offpeak's own HTTP/1.1 client, or `fetch` (https upstreams always use fetch)",
  }),
  /** Front threads (src/http/front): none by default, on any machine (src/defaults.ts defaultHttpThreads). */
  httpThreads: integer({
    env: "OFFPEAK_HTTP_THREADS",
    file: "server.http_threads",
    min: 0,
    max: 32,
    default: () => defaultHttpThreads(usableCores()),
    defaultDoc: "none (0)",
    doc: "front threads: threads besides the main one that listen on the port and do chat completions' pass-through work (see [HTTP threads](#http-threads))",
  }),
  maxFileBytes: integer({
    flag: "max-file-bytes",
    env: "OFFPEAK_MAX_FILE_BYTES",
    file: "limits.max_file_bytes",
    min: 1,
    default: 8 * 1024 ** 3,
    defaultDoc: "8 GiB",
    doc: "upload size limit (413 above)",
    readme: "upload size limit (413 above)",
  }),
  maxBatchLines: integer({
    flag: "max-batch-lines",
    env: "OFFPEAK_MAX_BATCH_LINES",
    file: "limits.max_batch_lines",
    min: 1,
    default: 10_000_000,
    defaultDoc: "10,000,000",
    doc: "requests per batch file",
    readme: "requests per batch file",
  }),
  /** Read by src/http/jsonBody.ts. */
  maxJsonBytes: integer({
    flag: "max-json-bytes",
    env: "OFFPEAK_MAX_JSON_BYTES",
    file: "limits.max_json_bytes",
    min: 1024,
    default: DEFAULT_MAX_JSON_BYTES,
    defaultDoc: "32 MiB",
    doc: "largest JSON request body; over it 413 `request_too_large`: a declared `Content-Length` over it is refused before the body is read, a chunked body is counted while read, and the connection is closed",
  }),
  /** Upload slots: src/files/uploadSlots.ts. */
  maxConcurrentUploads: integer({
    flag: "max-concurrent-uploads",
    env: "OFFPEAK_MAX_CONCURRENT_UPLOADS",
    file: "limits.max_concurrent_uploads",
    min: 1,
    max: 100_000,
    default: 16,
    defaultDoc: "16",
    doc: "uploads (`POST /files`) streaming at once on this server; more answer 429 with `retry-after` before their body is read. Each holds a temp file and, for a batch file, validator Workers: one scanner and its duplicate finder (≈5 MB and 2 threads), more scanners (up to `upload_validation_workers`) only while a large file streams in faster than one checks it",
  }),
  maxConcurrentUploadsPerKey: integer({
    flag: "max-concurrent-uploads-per-key",
    env: "OFFPEAK_MAX_CONCURRENT_UPLOADS_PER_KEY",
    file: "limits.max_concurrent_uploads_per_key",
    min: 1,
    max: 100_000,
    default: 4,
    defaultDoc: "4",
    doc: "the same, per key",
  }),
  /** src/http/idleReader.ts. */
  uploadIdleTimeoutS: integer({
    flag: "upload-idle-timeout-s",
    env: "OFFPEAK_UPLOAD_IDLE_TIMEOUT_S",
    file: "limits.upload_idle_timeout_s",
    min: 1,
    max: 3600,
    default: 60,
    defaultDoc: "60",
    doc: "an upload whose client sends no byte for this long (seconds; time offpeak itself is not reading does not count) is ended with 408 and its temp file removed",
  }),
  /** 4 MiB: up to 367K ids checked in memory, more spill to <dataDir>/tmp (src/jsonl/duplicateFinder.ts; BENCHMARKS.md "Upload"). */
  duplicateCheckBytes: integer({
    env: "OFFPEAK_DUPLICATE_CHECK_BYTES",
    file: "limits.duplicate_check_bytes",
    min: 8192,
    default: 4 << 20,
    defaultDoc: "4 MiB",
    doc: "memory an upload's custom_id duplicate check may use; past it, fingerprints spill to `tmp/` (see [Limits](#limits))",
  }),
  /** src/defaults.ts defaultValidationWorkers. */
  uploadValidationWorkers: integer({
    env: "OFFPEAK_UPLOAD_VALIDATION_WORKERS",
    file: "limits.upload_validation_workers",
    min: 1,
    max: 64,
    default: () => defaultValidationWorkers(usableCores()),
    defaultDoc: "2 up to 3 cores, 3 on 4, then 4",
    doc: "scanner Workers that may check one batch upload's lines at once: the HTTP thread cuts the body into ~1 MB blocks at line ends and the least busy scanner checks each; a finder puts the verdicts back in file order (line numbers, duplicates across blocks, the line limit)",
  }),
  mimallocPurgeDelay: external({
    env: "MIMALLOC_PURGE_DELAY",
    defaultDoc: "20 (set by `serve`)",
    valuesDoc: "integer (ms)",
    doc: "time before memory freed by the allocator goes back to the OS. `offpeak serve` re-executes itself once at start (same process id and command line) with 20: peak RSS of a 10M-line batch 239 MB instead of 264–270, at some batch speed (1M lines: 7.5–9.5 s against 6.1 s without it, on a VM where page faults are dear; 0 took 13 s there; docs/benchmarks/history.md \"Stall\"). Set it yourself (e.g. `250`) to prefer speed; `OFFPEAK_NO_REEXEC=1` skips the re-exec",
  }),
  sseKeepAliveMs: integer({
    env: "OFFPEAK_SSE_KEEPALIVE_MS",
    file: "server.sse_keepalive_ms",
    min: 100,
    max: 300_000,
    default: 15_000,
    defaultDoc: "15000",
    doc: "quiet time (ms) before a chat-session stream sends a `: keep-alive` comment (proxies drop idle streams)",
    readme: "quiet time before a chat-session stream sends `: keep-alive`",
  }),
  defaultRpm: integer<number | null>({
    env: "OFFPEAK_RPM",
    file: "limits.rpm",
    min: 1,
    default: null,
    defaultDoc: "unlimited",
    doc: "default requests/minute per key (interactive; a key's own `rate_limits` win)",
    readme: "default per-key requests per minute (a key's own `rate_limits` win)",
  }),
  defaultTpm: integer<number | null>({
    env: "OFFPEAK_TPM",
    file: "limits.tpm",
    min: 1,
    default: null,
    defaultDoc: "unlimited",
    doc: "default tokens/minute per key (interactive; a key's own `rate_limits` win)",
    readme: "default per-key tokens per minute (a key's own `rate_limits` win)",
  }),
  adminKey: text<string | null>({
    env: "OFFPEAK_ADMIN_KEY",
    blankUnset: true,
    default: null,
    defaultDoc: "none",
    valuesDoc: "a secret",
    doc: "this exact secret is an admin key of project `default`",
    readme: 'this exact key is an admin key of project `default` (listed in `GET /keys` as `"source": "env"`, not revocable there)',
  }),
  upstreamUrl: text<string | null>({
    env: "OFFPEAK_UPSTREAM_URL",
    fileDoc: "upstreams[]",
    blankUnset: true,
    default: null,
    defaultDoc: "none",
    valuesDoc: "an http(s) URL",
    doc: "one OpenAI-compatible engine (models from its `GET /models`), the upstream named `upstream`",
    readme: "OpenAI-compatible engine; models read from its `GET /models`",
  }),
  upstreamKey: text<string | null>({
    env: "OFFPEAK_UPSTREAM_KEY",
    fileDoc: "upstreams[].api_key_env",
    blankUnset: true,
    default: null,
    defaultDoc: "none",
    valuesDoc: "a secret",
    doc: "its API key",
    readme: "its API key",
  }),
  batches: {
    /** Batch Worker threads: src/defaults.ts defaultBatchWorkers. */
    workers: integer({
      env: "OFFPEAK_BATCH_WORKERS",
      file: "batches.workers",
      min: 0,
      max: 64,
      default: () => defaultBatchWorkers(usableCores()),
      defaultDoc: "one per usable core, at most 8",
      doc: "batch Worker threads; at most as many as the default for this machine parse lines at once (see [Batch Workers](#batch-workers))",
      readme: 'batch Worker threads (docs/OPERATING.md "Batch Workers")',
    }),
    maxAttempts: integer({
      env: "OFFPEAK_BATCH_MAX_ATTEMPTS",
      file: "batches.max_attempts",
      min: 1,
      max: 20,
      default: 10,
      defaultDoc: "10",
      doc: "attempts per upstream batch request (408/409/5xx/connection errors/timeouts); an outage or a 429 costs none",
      readme: "attempts per upstream request (408/409/5xx/connection errors/timeouts); an upstream outage or a 429 costs none",
    }),
    retryBaseMs: integer({
      env: "OFFPEAK_BATCH_RETRY_BASE_MS",
      file: "batches.retry_base_ms",
      min: 1,
      default: 500,
      defaultDoc: "500",
      doc: "first retry backoff (ms); doubles, full jitter, honours `retry-after`",
      readme: "first retry backoff (doubles, full jitter, honours `retry-after`)",
    }),
    leaseMs: integer({
      env: "OFFPEAK_BATCH_LEASE_MS",
      file: "batches.lease_ms",
      min: 1000,
      default: 30_000,
      defaultDoc: "30000",
      doc: "lease (ms) on claimed batch work",
      readme: "lease on claimed batch work",
    }),
    /** docs/CONTRACT.md §18 off-peak hours; checked at start: days, HH:MM, IANA tz. */
    peakHours: shaped(PeakWindows, {
      file: "batches.peak_hours",
      default: [],
      then: (windows) => {
        try {
          new PeakCalendar(windows);
        } catch (e) {
          throw new ConfigError((e as Error).message);
        }
        return windows;
      },
      defaultDoc: "none",
      valuesDoc: "a list of windows",
      doc: 'when batches with a window of 24h or more are held to `peak_share`: a list of `{"days": "mon-fri", "from": "08:00", "to": "20:00", "tz": "Europe/Berlin"}` (see [Scheduling](#scheduling-deadlines-fairness-off-peak-hours))',
    }),
    peakShare: number({
      file: "batches.peak_share",
      min: 0,
      max: 1,
      default: 1,
      defaultDoc: "1 (no cap)",
      doc: "the share of each limited model's concurrency those batches may use during peak hours",
    }),
  },
  /** Checked at start, so a typo stops it (src/webhooks/egress.ts applies them). */
  webhookAllowedHosts: list({
    env: "OFFPEAK_WEBHOOK_ALLOWED_HOSTS",
    file: "webhooks.allowed_hosts",
    default: [],
    then: (raw) => {
      const entries = raw.map((s) => s.trim()).filter(Boolean);
      try {
        parseAllowedHosts(entries);
      } catch (e) {
        throw new ConfigError(`webhooks.allowed_hosts: ${(e as Error).message}`);
      }
      return entries;
    },
    defaultDoc: "none",
    doc: "internal webhook receivers to allow: host names, `*.name`, IPs or CIDRs; by default loopback, private, link-local (cloud metadata) and similar targets are refused (see [Where webhooks may go](#where-webhooks-may-go))",
    readme:
      'internal webhook receivers to allow (host names, `*.name`, IPs, CIDRs); by default loopback, private, link-local (cloud metadata) and similar targets are refused; see docs/OPERATING.md "Where webhooks may go"',
  }),
};

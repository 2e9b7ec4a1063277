#!/usr/bin/env bun
// offpeak: `serve` (default) runs the server; `keys …` manages API keys
// directly in the data dir (safe while a server runs on it: SQLite WAL);
// `files`, `batches`, `batch run` and `healthcheck` are clients of a running
// server (src/cli/).
// First: `serve` may re-execute itself before the rest loads (allocator.ts says why).
import "./allocator";
import { CLIENT_COMMANDS, CliError, forProgram } from "./cli";
import { listenForInterrupt } from "./cli/interrupt";
import { ConfigError, KEYS_FLAGS, resolveConfig, serverFlags } from "./config";
import { commandWords } from "./flags";
import { existsSync } from "node:fs";
import { openDb } from "./db/client";
import { DatabaseUnavailable } from "./db/unavailable";
import { restrictNewFiles, secureDataDir } from "./dataDir";
import { ApiError } from "./errors";
import { createKey, listKeys, revokeKey } from "./keys/service";
import { startServer } from "./server";

const HELP = `offpeak — OpenAI-compatible Files + Batch API server

Server (works on the data directory):
  offpeak [serve] [--port N] [--host H] [--data-dir D] [--config FILE]
                  [--max-file-bytes N] [--max-batch-lines N] [--log-level L]
                  [--max-json-bytes N] [--max-concurrent-uploads N]
                  [--max-concurrent-uploads-per-key N] [--upload-idle-timeout-s S]
                  [--storage-url file:|s3://BUCKET[/PREFIX]]
  offpeak keys create --name N [--scopes a,b] [--project P] [--data-dir D]
  offpeak keys list [--data-dir D]
  offpeak keys revoke ID [--data-dir D]

Client (talks to a running server; --base-url, --api-key):
  offpeak files upload|list|get|download|rm …
  offpeak batches create|get|list|cancel|retry|wait …   (wait --out FILE: download the results)
  offpeak webhooks create|list|rm …
  offpeak upstreams list|add|drain|activate|remove …   (the engines of each upstream; admin key)
  offpeak batch run FILE.jsonl [--out RESULTS.jsonl] [--errors ERRORS.jsonl]
  offpeak healthcheck [--url URL]

  offpeak --help | offpeak COMMAND --help

Environment: PORT, HOST, OFFPEAK_DATA_DIR, OFFPEAK_CONFIG, OFFPEAK_ADMIN_KEY,
OFFPEAK_MAX_FILE_BYTES, OFFPEAK_MAX_BATCH_LINES, OFFPEAK_LOG_LEVEL,
OFFPEAK_UPSTREAM_URL, OFFPEAK_UPSTREAM_KEY, OFFPEAK_STORAGE_URL (with S3_ENDPOINT,
S3_REGION, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY or AWS_*); for the client: OFFPEAK_BASE_URL
(default http://127.0.0.1:$PORT/v1, 8080 without PORT), OFFPEAK_API_KEY.

Exit codes: 0 success; 1 a batch failed, expired or was cancelled (batch run,
batches wait); 2 bad usage, an unreachable server or a refused request;
3 --timeout passed before the batch ended (batch run, batches wait);
130 interrupted with Ctrl-C (batch run, batches wait: the batch keeps running).
`;

async function main(argv: string[]): Promise<number> {
  // The server's flags may come before the command word (`offpeak --port 9000` serves).
  const { words, help } = commandWords(argv, KEYS_FLAGS);
  const command = words[0]?.value ?? "serve";
  const client = Object.hasOwn(CLIENT_COMMANDS, command) ? CLIENT_COMMANDS[command] : undefined;
  if (client) {
    listenForInterrupt(); // now, not when a step first has something to say (src/cli/interrupt.ts)
    // Everything after the command word goes to the client, which parses its own flags.
    const at = words[0]!.index;
    return client([...argv.slice(at + 1), ...argv.slice(0, at)]);
  }
  const topic = words[1]?.value;
  if (command === "help" && topic && Object.hasOwn(CLIENT_COMMANDS, topic)) return CLIENT_COMMANDS[topic]!(["--help"]);
  if (help || command === "help") {
    process.stdout.write(forProgram(HELP));
    return 0;
  }
  if (command === "serve") return serve(argv);
  if (command === "keys") return keys(argv);
  process.stderr.write(`offpeak: unknown command '${command}'\n\n${forProgram(HELP)}`);
  return 2;
}

async function serve(argv: string[]): Promise<number> {
  const config = resolveConfig(argv);
  // It says where it is (the console, the API base, the data) once it answers: startServer's banner.
  const server = await startServer(config);
  await new Promise<void>((resolve) => {
    let stopping = false;
    const shutdown = (signal: string) => {
      if (stopping) return;
      stopping = true;
      server.ctx.log.info("shutting down", { signal });
      // Hard stop if a clean shutdown hangs: docs/CONTRACT.md §9 asks for exit within 10 s.
      setTimeout(() => process.exit(0), 9000).unref();
      server.stop().finally(resolve);
    };
    process.on("SIGTERM", () => shutdown("SIGTERM"));
    process.on("SIGINT", () => shutdown("SIGINT"));
  });
  return 0;
}

const KEYS_VERBS = ["create", "list", "revoke"];

async function keys(argv: string[]): Promise<number> {
  const { flags, positional } = serverFlags(argv, KEYS_FLAGS);
  const args = positional.slice(1); // after "keys"
  // Usage is checked before the database is opened: opening creates it.
  const verb = args[0] ?? "";
  if (!KEYS_VERBS.includes(verb)) throw new ConfigError("keys needs a verb: create | list | revoke");
  if (verb === "create" && !flags["name"]) throw new ConfigError("keys create needs --name NAME");
  if (verb === "revoke" && !args[1]) throw new ConfigError("keys revoke needs a key id");
  const config = resolveConfig(argv, undefined, KEYS_FLAGS);
  // A mistyped --data-dir must not look like "no keys" (or take a revocation silently):
  // only create may start a database, so keys can be made before the first start.
  const dbc = config.database;
  if (verb !== "create" && dbc.kind === "sqlite" && !existsSync(dbc.path))
    throw new ConfigError(`no offpeak database at ${dbc.path}: is --data-dir right? (keys create makes one)`);
  // The database this may create holds webhook secrets and chats: 0700/0600 as the server makes them (src/dataDir.ts).
  if (dbc.kind === "sqlite") {
    for (const p of secureDataDir(config.dataDir, dbc))
      process.stderr.write(`offpeak: ${p.path} was open to other users (${p.was}): ${p.tightened ? "tightened" : "could not tighten it"}\n`);
  } else restrictNewFiles();
  // FULL: each commit is fsynced before the key (or "revoked") is printed (Postgres: every commit is).
  const db = await openDb(dbc, { synchronous: "FULL" });
  try {
    if (verb === "create") {
      const created = await createKey(db, {
        name: flags["name"]!,
        // Given but empty (`--scopes ""`) is an error, as `"scopes": []` is for the API; not given means the defaults.
        scopes: flags["scopes"] !== undefined ? flags["scopes"].split(",").map((s) => s.trim()).filter(Boolean) : undefined,
        project: flags["project"],
      });
      process.stdout.write(created.key + "\n");
      return 0;
    }
    if (verb === "list") {
      for (const k of await listKeys(db)) process.stdout.write(`${k.id}\t${k.prefix}…\t${k.project}\t${k.scopes.join(",")}\t${k.name}\n`);
      return 0;
    }
    await revokeKey(db, args[1]!);
    process.stdout.write(`revoked ${args[1]}\n`);
    return 0;
  } finally {
    await db.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof CliError) {
      process.stderr.write(`offpeak: ${err.message}\n`);
      process.exit(err.exitCode);
    }
    // A database that did not answer within database.start_wait_s: the message says which and how long.
    if (err instanceof DatabaseUnavailable) {
      process.stderr.write(`offpeak: ${err.message}\n`);
      process.exit(1);
    }
    if (err instanceof ConfigError || err instanceof ApiError) {
      process.stderr.write(`offpeak: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`offpeak: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);

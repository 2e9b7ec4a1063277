// One flag parser for the server and the client commands (src/flags.ts), and
// the environment read in one place (src/config.ts).
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { clientEnv, ConfigError, defaultHttpThreads, KEYS_FLAGS, resolveConfig, SERVER_FLAGS } from "../src/config";
import { threadSettingsOf } from "../src/threadSettings";
import { commandWords, parseFlags, type FlagSpec } from "../src/flags";
import { CliError } from "../src/cli";
import { parseVerb } from "../src/cli/args";

const ROOT = join(import.meta.dir, "..");
const fail = (m: string) => new Error(m);
const SPEC: FlagSpec = { out: "string", json: "boolean", metadata: "list", help: "boolean" };
const parse = (argv: string[]) => parseFlags(argv, SPEC, fail);
const message = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return (e as Error).message;
  }
  return "no error";
};

describe("parseFlags", () => {
  test("values in both spellings, booleans, lists, positional words anywhere, `--` ends the flags", () => {
    expect(parse(["a", "--out", "x", "--json", "b", "--metadata", "k=v", "--metadata=k2=v2", "--out=y", "--", "--json"])).toEqual({
      flags: { out: "y" },
      bools: { json: true },
      lists: { metadata: ["k=v", "k2=v2"] },
      positional: ["a", "b", "--json"],
    });
    expect(parse(["--json=false", "--out="]).bools.json).toBe(false);
    expect(parse(["--out="]).flags.out).toBe("");
    expect(parse(["--out", ""]).flags.out).toBe("");
    expect(parse(["--out", "-"]).flags.out).toBe("-");
  });

  test("short forms only for the flags the command takes", () => {
    expect(parse(["-h", "-o", "f"])).toMatchObject({ bools: { help: true }, flags: { out: "f" } });
    expect(parse(["-ofile"]).flags.out).toBe("file");
    expect(message(() => parseFlags(["-o", "f"], { help: "boolean" }, fail))).toBe("unknown option -o");
    expect(message(() => parse(["-x"]))).toBe("unknown option -x");
  });

  test("usage mistakes, each with its message", () => {
    expect(message(() => parse(["--bogus"]))).toBe("unknown option --bogus");
    expect(message(() => parse(["--bogus=1"]))).toBe("unknown option --bogus");
    expect(message(() => parse(["--out"]))).toBe("--out needs a value");
    expect(message(() => parse(["--out", "--json"]))).toBe("--out needs a value");
    expect(message(() => parse(["--metadata"]))).toBe("--metadata needs a value");
    expect(message(() => parse(["--json=yes"]))).toBe("--json takes no value");
    expect(message(() => parse(["--constructor"]))).toBe("unknown option --constructor");
  });

  test("the server throws ConfigError, the client CliError (both exit 2)", () => {
    expect(() => resolveConfig(["--prot", "1"], {})).toThrow(ConfigError);
    expect(message(() => resolveConfig(["--data-dir"], {}))).toBe("--data-dir needs a value");
    expect(message(() => resolveConfig(["--name", "x"], {}))).toBe("unknown option --name");
    const e = (() => {
      try {
        parseVerb(["--limit"], { limit: "string" });
      } catch (e) {
        return e;
      }
    })();
    expect(e).toBeInstanceOf(CliError);
    expect((e as CliError).exitCode).toBe(2);
    expect((e as CliError).message).toBe("--limit needs a value");
  });

  test("`keys` takes the server's flags and its own", () => {
    for (const name of Object.keys(SERVER_FLAGS)) expect(KEYS_FLAGS[name]).toBe(SERVER_FLAGS[name]!);
    expect(resolveConfig(["keys", "create", "--name", "x", "--port", "0"], {}, KEYS_FLAGS).port).toBe(0);
  });
});

describe("commandWords (main.ts picks the command)", () => {
  const words = (argv: string[]) => commandWords(argv, KEYS_FLAGS).words.map((w) => w.value);
  test("server flags before the command are read as declared; a client flag before it takes its value", () => {
    expect(words(["--port", "9000"])).toEqual([]);
    expect(words(["--data-dir", "d", "keys", "list"])).toEqual(["keys", "list"]);
    expect(words(["--base-url", "http://x/v1", "files", "list", "--limit", "5"])).toEqual(["files", "list"]);
    expect(commandWords(["--base-url", "u", "files"], KEYS_FLAGS).words[0]).toEqual({ value: "files", index: 2 });
  });
  test("--help and -h anywhere", () => {
    expect(commandWords(["-h"], KEYS_FLAGS).help).toBe(true);
    expect(commandWords(["serve", "--help"], KEYS_FLAGS).help).toBe(true);
    expect(commandWords(["serve"], KEYS_FLAGS).help).toBe(false);
  });
});

describe("the environment", () => {
  test("client defaults: OFFPEAK_BASE_URL, else the local server on PORT; OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY", () => {
    expect(clientEnv({})).toEqual({ baseUrl: "http://127.0.0.1:8080/v1", apiKey: undefined, healthUrl: "http://127.0.0.1:8080/healthz" });
    expect(clientEnv({ PORT: "9000", OFFPEAK_ADMIN_KEY: "a" })).toEqual({ baseUrl: "http://127.0.0.1:9000/v1", apiKey: "a", healthUrl: "http://127.0.0.1:9000/healthz" });
    expect(clientEnv({ OFFPEAK_BASE_URL: "http://h/v1", OFFPEAK_API_KEY: "k", OFFPEAK_ADMIN_KEY: "a" })).toMatchObject({ baseUrl: "http://h/v1", apiKey: "k" });
    expect(clientEnv({ OFFPEAK_BASE_URL: "", OFFPEAK_API_KEY: "" }).apiKey).toBeUndefined();
  });

  test("per-thread settings: fsync switch and test hooks, the delay by thread", () => {
    expect(threadSettingsOf({}, true)).toEqual({ fsync: true, testFsyncLog: null, testFsyncDelayMs: 0, testFinalizePauseMs: 0, testFrontCrashPath: null });
    const env = {
      OFFPEAK_UNSAFE_NO_FSYNC: "1",
      OFFPEAK_TEST_FSYNC_LOG: "/tmp/l",
      OFFPEAK_TEST_FSYNC_DELAY_MS: "5",
      OFFPEAK_TEST_FSYNC_WORKER_DELAY_MS: "7",
      OFFPEAK_TEST_FINALIZE_PAUSE_MS: "9",
      OFFPEAK_TEST_FRONT_CRASH_PATH: "/x",
    };
    expect(threadSettingsOf(env, true)).toEqual({ fsync: false, testFsyncLog: "/tmp/l", testFsyncDelayMs: 5, testFinalizePauseMs: 9, testFrontCrashPath: "/x" });
    expect(threadSettingsOf(env, false).testFsyncDelayMs).toBe(7);
  });

  test("front threads: none by default on any machine; OFFPEAK_HTTP_THREADS 0–32 wins; the fetch limit as started", () => {
    expect([2, 4, 7, 8, 9, 10, 12, 16, 64].map(defaultHttpThreads)).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0]);
    expect(resolveConfig([], {}).httpThreads).toBe(0);
    expect(resolveConfig([], { OFFPEAK_HTTP_THREADS: "0" }).httpThreads).toBe(0);
    expect(resolveConfig([], { OFFPEAK_HTTP_THREADS: "6" }).httpThreads).toBe(6);
    expect(() => resolveConfig([], { OFFPEAK_HTTP_THREADS: "33" })).toThrow(ConfigError);
    expect(() => resolveConfig([], { OFFPEAK_HTTP_THREADS: "two" })).toThrow(ConfigError);
    expect(resolveConfig([], {}).fetchConcurrency).toBe(256);
    expect(resolveConfig([], { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" }).fetchConcurrency).toBe(65535);
  });

  test("OFFPEAK_PG_POOL: Postgres only, an integer ≥ 1", () => {
    const pgUrl = ["--database-url", "postgres://u@h/db"];
    expect(resolveConfig(pgUrl, {}).database).toEqual({ kind: "postgres", url: "postgres://u@h/db" });
    expect(resolveConfig(pgUrl, { OFFPEAK_PG_POOL: "3" }).database).toEqual({ kind: "postgres", url: "postgres://u@h/db", pool: 3 });
    expect(() => resolveConfig(pgUrl, { OFFPEAK_PG_POOL: "0" })).toThrow(ConfigError);
    expect(resolveConfig(["--data-dir", "/tmp/x"], { OFFPEAK_PG_POOL: "junk" }).database.kind).toBe("sqlite");
  });

  test("process.env is read in src/config.ts and nowhere else in src/", () => {
    const readers: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
        const rel = `${dir}/${e.name}`;
        if (e.isDirectory()) walk(rel);
        else if (/\.tsx?$/.test(e.name) && rel !== "src/config.ts") {
          const code = readFileSync(join(ROOT, rel), "utf8")
            .split("\n")
            .filter((l) => !/^\s*(\/\/|\*|\/\*)/.test(l));
          if (code.some((l) => /\b(process\.env|Bun\.env)\b/.test(l))) readers.push(rel);
        }
      }
    };
    walk("src");
    expect(readers).toEqual([]);
  });
});

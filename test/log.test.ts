// The buffered request log (src/log.ts): lines are written in batches, yet
// none is lost on SIGTERM, an error line is out before the process can die,
// order holds when the descriptor refuses bytes (EAGAIN, short writes), and
// secrets stay redacted.
import { describe, expect, setSystemTime, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BufferedFdSink, createLogger, FLUSH_BYTES } from "../src/log";
import { requestMembers, routeMembers } from "../src/metrics/requestLine";
import { principals } from "../src/auth/plugin";
import { pathOf } from "../src/http/path";
import { ConfigError, resolveConfig } from "../src/config";
import { freshDataDir } from "./helpers/server";
import { pollUntil } from "./helpers/batches";
import { SCENARIO_MS } from "./helpers/wait";
import { cleanEnv, freePort } from "./helpers/env";

const ROOT = join(import.meta.dir, "..");
const MAIN = join(ROOT, "src/main.ts");

const parseLines = (text: string) =>
  text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe("request log through a real server process", () => {
  test("N requests then SIGTERM: N request lines, valid JSON, in order, secrets redacted", async () => {
    const dataDir = freshDataDir();
    const admin = "sk-op-buffered-log-admin-00000000000000000000";
    const port = await freePort();
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
      const N = 400;
      const ids: string[] = [];
      for (let i = 0; i < N; i++) {
        // Every fifth request puts the key where it does not belong (the path): refused, and redacted in the log.
        const res =
          i % 5 === 4
            ? await fetch(`${url}/api/v1/files/${admin}`, { headers: { authorization: `Bearer ${admin}` } })
            : await fetch(`${url}/api/v1/files?limit=${(i % 20) + 1}`, { headers: { authorization: `Bearer ${admin}` } });
        await res.arrayBuffer();
        ids.push(res.headers.get("x-request-id")!);
      }
      // Without a key: the peer's address is all the line can say about who sent it.
      const anonymous = await fetch(`${url}/api/v1/files`);
      expect(anonymous.status).toBe(401);
      ids.push(anonymous.headers.get("x-request-id")!);
      // The last lines are still in the buffer (FLUSH_MS): SIGTERM right away.
      proc.kill("SIGTERM");
      expect(await proc.exited).toBe(0);
      const text = await stderr;
      const lines = parseLines(text); // throws on any line that is not JSON
      const requests = lines.filter((l) => l.msg === "request" && l.route !== "/healthz");
      expect(requests.map((l) => l.request_id)).toEqual(ids);
      expect(requests.filter((l) => l.status === 404).length).toBe(N / 5);
      // By default (log_client_address: unauthenticated) only that line asks the socket for the address.
      expect(requests.filter((l) => l.key_id !== null).every((l) => l.client === null)).toBe(true);
      expect(requests.at(-1)).toMatchObject({ status: 401, key_id: null, client: "127.0.0.1" });
      expect(lines.filter((l) => l.msg !== "request").map((l) => l.msg)).toEqual(["listening", "shutting down"]);
      expect(text).not.toContain(admin);
      expect(text).not.toContain(admin.slice(6));
      expect(text.toLowerCase()).not.toContain("bearer ");
    } finally {
      if (proc.exitCode === null) proc.kill("SIGKILL");
      await proc.exited;
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, SCENARIO_MS);
});

describe("a log reader that does not read", () => {
  test("requests go on while nobody drains stderr (non-blocking writes); every line is there once the reader reads", async () => {
    const dataDir = freshDataDir();
    const admin = "sk-op-stalled-reader-admin-000000000000000000";
    const port = await freePort();
    const proc: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn([process.execPath, MAIN, "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir], {
      cwd: ROOT,
      env: cleanEnv({ OFFPEAK_ADMIN_KEY: admin, OFFPEAK_LOG_LEVEL: "info" }),
      stdout: "pipe",
      stderr: "pipe",
      stdin: "ignore",
    });
    try {
      const url = `http://127.0.0.1:${port}`;
      await pollUntil(() => fetch(`${url}/healthz`).then((r) => r.status, () => 0), (s) => s === 200, 20_000, 50, "server up");
      // ≈1,500 request lines ≈ 450 KB: far past a 64 KB pipe that nobody reads.
      // A blocking write(2) would freeze the server at the first full pipe.
      const N = 1500;
      const t0 = performance.now();
      for (let i = 0; i < N; i += 50)
        await Promise.all(Array.from({ length: 50 }, () => fetch(`${url}/api/v1/files?limit=1`, { headers: { authorization: `Bearer ${admin}` } }).then((r) => r.arrayBuffer())));
      expect(performance.now() - t0).toBeLessThan(15_000);
      if (process.platform === "linux") {
        const flags = /flags:\s+(\d+)/.exec(readFileSync(`/proc/${proc.pid}/fdinfo/2`, "utf8"))![1]!;
        expect(parseInt(flags, 8) & 0o4000).toBe(0o4000); // O_NONBLOCK
      }
      const stderr = new Response(proc.stderr).text();
      proc.kill("SIGTERM");
      expect(await proc.exited).toBe(0);
      const lines = parseLines(await stderr);
      expect(lines.filter((l) => l.msg === "request" && l.route === "/api/v1/files").length).toBe(N);
    } finally {
      if (proc.exitCode === null) proc.kill("SIGKILL");
      await proc.exited;
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, SCENARIO_MS);
});

describe("crash paths", () => {
  const script = join(freshDataDir(), "crash.ts");
  writeFileSync(
    script,
    `import { createLogger } from ${JSON.stringify(join(ROOT, "src/log.ts"))};
const log = createLogger("info");
for (let i = 0; i < 50; i++) log.info("request", { i, path: "/x/sk-op-secret-in-path-000000" });
const mode = process.argv[2];
if (mode === "kill") {
  log.error("fatal", { reason: "about to die", authorization: "Bearer sk-op-secret-header-0000" });
  process.kill(process.pid, "SIGKILL");
} else if (mode === "throw") {
  setTimeout(() => { throw new Error("boom sk-op-secret-in-stack-00000"); }, 1);
} else if (mode === "reject") {
  Promise.reject(new Error("rejected"));
}
`,
  );
  const run = async (mode: string) => {
    const p = Bun.spawn([process.execPath, script, mode], { stdout: "ignore", stderr: "pipe", stdin: "ignore" });
    const [text, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
    return { text, code, signal: p.signalCode };
  };
  const jsonLines = (text: string) => parseLines(text.split("\n").filter((l) => l.startsWith("{")).join("\n"));

  test("an error line (and every line before it) is out even when the process is SIGKILLed right after", async () => {
    const { text, signal } = await run("kill");
    expect(signal).toBe("SIGKILL");
    const lines = parseLines(text);
    expect(lines.map((l) => l.i ?? l.msg)).toEqual([...Array.from({ length: 50 }, (_, i) => i), "fatal"]);
    expect(lines.at(-1)).toMatchObject({ level: "error", reason: "about to die", authorization: "[redacted]" });
    expect(text).not.toContain("sk-op-secret");
  });

  test("an uncaught exception: the buffered lines, then the exception as a JSON error line, before the runtime's report", async () => {
    const { text, code } = await run("throw");
    expect(code).not.toBe(0);
    const firstJson = text.indexOf("{");
    expect(firstJson).toBe(0); // nothing of the runtime's report before our lines
    const lines = jsonLines(text);
    expect(lines.length).toBe(51);
    expect(lines.at(-1)).toMatchObject({ level: "error", msg: "uncaught exception" });
    expect(String(lines.at(-1)!.error)).toContain("boom");
    expect(JSON.stringify(lines)).not.toContain("sk-op-secret");
  });

  test("an unhandled rejection: the buffered lines are written at exit", async () => {
    const { text, code } = await run("reject");
    expect(code).not.toBe(0);
    expect(jsonLines(text).map((l) => l.i)).toEqual(Array.from({ length: 50 }, (_, i) => i));
  });
});

describe("BufferedFdSink", () => {
  /** A descriptor that takes at most `take(call)` bytes per write, or throws EAGAIN when that is 0. */
  function fakeFd(take: (call: number) => number) {
    const chunks: Uint8Array[] = [];
    let calls = 0;
    const write = (_fd: number, buf: Uint8Array, off: number, len: number) => {
      const n = Math.min(len, take(calls++));
      if (n === 0) throw Object.assign(new Error("EAGAIN"), { code: "EAGAIN" });
      chunks.push(Uint8Array.prototype.slice.call(buf, off, off + n)); // a copy: the sink reuses its buffer
      return n;
    };
    const text = () => Buffer.concat(chunks).toString("utf8");
    return { write, text, calls: () => calls };
  }

  test("many lines, few writes; flush() writes the rest", () => {
    const fd = fakeFd(() => Infinity);
    const sink = new BufferedFdSink(99, fd.write);
    const log = createLogger("info", sink);
    for (let i = 0; i < 1000; i++) log.info("request", { i });
    const expected = Math.floor((1000 * 60) / FLUSH_BYTES); // lines are ≈60 bytes
    expect(fd.calls()).toBeLessThanOrEqual(expected + 2);
    log.flush();
    expect(parseLines(fd.text()).map((l) => l.i)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
  });

  test("EAGAIN and short writes keep every byte, in order (multi-byte text included)", () => {
    // Refuse every 50th write, take 7 bytes at a time otherwise (cutting through UTF-8 sequences).
    const fd = fakeFd((call) => (call % 50 === 49 ? 0 : 7));
    const sink = new BufferedFdSink(99, fd.write);
    const log = createLogger("debug", sink);
    for (let i = 0; i < 300; i++) log.info("request", { i, note: "é→🙂" });
    log.error("last");
    const lines = parseLines(fd.text());
    expect(lines.map((l) => l.i ?? l.msg)).toEqual([...Array.from({ length: 300 }, (_, i) => i), "last"]);
    expect(lines[5]!.note).toBe("é→🙂");
  });

  test("a timer flushes a quiet buffer within FLUSH_MS", async () => {
    const fd = fakeFd(() => Infinity);
    const log = createLogger("info", new BufferedFdSink(99, fd.write));
    log.info("one");
    expect(fd.calls()).toBe(0);
    await Bun.sleep(50);
    expect(parseLines(fd.text()).map((l) => l.msg)).toEqual(["one"]);
  });

  test("a reader that stops reading: up to 8 MB wait, later lines are dropped and counted, then reported in order", () => {
    let open = false;
    const fd = fakeFd(() => (open ? Infinity : 0));
    const log = createLogger("info", new BufferedFdSink(99, fd.write));
    const pad = "x".repeat(1000);
    for (let i = 0; i < 10_000; i++) log.info("request", { i, pad }); // ≈10 MB
    open = true;
    log.flush();
    log.info("after");
    log.flush();
    const lines = parseLines(fd.text());
    const kept = lines.filter((l) => l.msg === "request").map((l) => l.i as number);
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => i)); // a prefix, in order
    expect(kept.length).toBeGreaterThan(7_000);
    const note = lines.find((l) => l.msg === "log lines dropped: stderr did not take them")!;
    expect(note.count).toBe(10_000 - kept.length);
    expect(lines.indexOf(note)).toBe(kept.length);
    expect(lines.at(-1)!.msg).toBe("after");
  });

  test("a closed descriptor (EPIPE) drops lines instead of throwing into the caller", () => {
    const sink = new BufferedFdSink(99, () => {
      throw Object.assign(new Error("EPIPE"), { code: "EPIPE" });
    });
    const log = createLogger("info", sink);
    log.error("nowhere to go");
    for (let i = 0; i < 2000; i++) log.info("request", { i });
    log.flush();
  });
});

describe("the line's start (time, level, message), made once per millisecond", () => {
  test("each line has its own level and message within a millisecond, and the time moves on with the clock", () => {
    const lines: string[] = [];
    const log = createLogger("debug", (l) => lines.push(l));
    setSystemTime(new Date("2026-11-26T10:00:00.001Z"));
    try {
      log.members("info", "request", `"a":1`);
      log.members("warn", "request", `"a":2`);
      log.members("warn", "other", `"a":3`);
      log.info("request");
      log.members("info", "request", "");
      setSystemTime(new Date("2026-11-26T10:00:00.002Z"));
      log.members("info", "request", `"a":4`);
    } finally {
      setSystemTime();
    }
    expect(lines.map((l) => JSON.parse(l))).toEqual([
      { time: "2026-11-26T10:00:00.001Z", level: "info", msg: "request", a: 1 },
      { time: "2026-11-26T10:00:00.001Z", level: "warn", msg: "request", a: 2 },
      { time: "2026-11-26T10:00:00.001Z", level: "warn", msg: "other", a: 3 },
      { time: "2026-11-26T10:00:00.001Z", level: "info", msg: "request" },
      { time: "2026-11-26T10:00:00.001Z", level: "info", msg: "request" },
      { time: "2026-11-26T10:00:00.002Z", level: "info", msg: "request", a: 4 },
    ]);
  });
});

describe("request line fields (src/metrics/requestLine.ts)", () => {
  const line = (members: string) => {
    const lines: string[] = [];
    createLogger("info", (l) => lines.push(l)).members("info", "request", members);
    return JSON.parse(lines[0]!) as Record<string, unknown>;
  };
  test("valid JSON whatever the path holds; the path is cut at 200 characters and keys in it are redacted; no key: nulls", () => {
    // The path as a server may pass it on (not normalised as new Request would).
    const raw = '/api/v1/files/a"b\\c\u00e9\n/sk-op-secret-in-path-000000';
    const request = new Request("http://127.0.0.1/api/v1/files/x");
    const server = { requestIP: () => ({ address: "10.0.0.7" }) };
    const l = line(requestMembers(request, server, "/api/v1/files/*", raw, 404, 0.0012345));
    expect(l).toMatchObject({ msg: "request", method: "GET", route: "/api/v1/files/*", status: 404, duration_ms: 1.23, key_id: null, project: null, client: "10.0.0.7" });
    expect(l.path).toBe('/api/v1/files/a"b\\c\u00e9\n/sk-[redacted]');
    const long = new Request(`http://127.0.0.1/${"x".repeat(300)}`);
    expect(line(requestMembers(long, undefined, "unmatched", pathOf(long.url), 404, 0)).path).toBe(`/${"x".repeat(199)}…`);
    expect(line(requestMembers(long, undefined, "unmatched", pathOf(long.url), 404, 0)).client).toBeNull();
  });
  test("client: asked of the socket only for a line without a key, unless every line wants it", () => {
    let asked = 0;
    const server = {
      requestIP: () => {
        asked++;
        return { address: "10.0.0.7" };
      },
    };
    const keyed = new Request("http://127.0.0.1/api/v1/models");
    principals.set(keyed, { keyId: "key_abc", project: "p", scopes: [], rpm: null, tpm: null });
    const anonymous = new Request("http://127.0.0.1/api/v1/models");
    const client = (r: Request, every: boolean) => line(requestMembers(r, server, "/api/v1/models", "/api/v1/models", 200, 0.001, every)).client;
    expect([client(keyed, false), asked]).toEqual([null, 0]);
    expect([client(anonymous, false), asked]).toEqual(["10.0.0.7", 1]);
    expect([client(keyed, true), asked]).toEqual(["10.0.0.7", 2]);
    expect([client(anonymous, true), asked]).toEqual(["10.0.0.7", 3]);
  });

  test("the parts kept per route, status and key: each line still has its own route, status, key and duration", () => {
    const keyed = (keyId: string) => {
      const r = new Request("http://127.0.0.1/api/v1/models", { method: "POST" });
      principals.set(r, { keyId, project: `p-${keyId}`, scopes: [], rpm: null, tpm: null });
      return r;
    };
    const [a, b] = [keyed("key_a"), keyed("key_b")];
    const routeA = routeMembers("POST", "/api/v1/models", "/api/v1/models");
    const routeB = routeMembers("POST", "/api/v1/files", "/api/v1/files");
    const seen = [
      line(requestMembers(a, undefined, "/api/v1/models", "/api/v1/models", 200, 0.001, false, routeA)),
      line(requestMembers(a, undefined, "/api/v1/models", "/api/v1/models", 429, 0.002, false, routeA)),
      line(requestMembers(b, undefined, "/api/v1/files", "/api/v1/files", 200, 0.003, false, routeB)),
      line(requestMembers(a, undefined, "/api/v1/models", "/api/v1/models", 200, 0.0045, false, routeA)),
    ].map(({ route, status, key_id, project, duration_ms, client }) => ({ route, status, key_id, project, duration_ms, client }));
    expect(seen).toEqual([
      { route: "/api/v1/models", status: 200, key_id: "key_a", project: "p-key_a", duration_ms: 1, client: null },
      { route: "/api/v1/models", status: 429, key_id: "key_a", project: "p-key_a", duration_ms: 2, client: null },
      { route: "/api/v1/files", status: 200, key_id: "key_b", project: "p-key_b", duration_ms: 3, client: null },
      { route: "/api/v1/models", status: 200, key_id: "key_a", project: "p-key_a", duration_ms: 4.5, client: null },
    ]);
  });

  test("log_client_address: unauthenticated by default, always on request, anything else refused", () => {
    const dir = freshDataDir();
    try {
      expect(resolveConfig(["--data-dir", dir], {}).logClientAddress).toBe("unauthenticated");
      expect(resolveConfig(["--data-dir", dir], { OFFPEAK_LOG_CLIENT_ADDRESS: "always" }).logClientAddress).toBe("always");
      const file = join(dir, "config.json");
      writeFileSync(file, JSON.stringify({ server: { log_client_address: "always" } }));
      expect(resolveConfig(["--data-dir", dir, "--config", file], {}).logClientAddress).toBe("always");
      expect(() => resolveConfig(["--data-dir", dir], { OFFPEAK_LOG_CLIENT_ADDRESS: "sometimes" })).toThrow(ConfigError);
      writeFileSync(file, JSON.stringify({ server: { log_client_address: "never" } }));
      expect(() => resolveConfig(["--data-dir", dir, "--config", file], {})).toThrow();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a key's id and project, the project redacted if it looks like a secret", () => {
    const request = new Request("http://127.0.0.1/api/v1/models");
    principals.set(request, { keyId: "key_abc", project: 'team "sk-op-0123456789abcdef"', scopes: [], rpm: null, tpm: null });
    const l = line(requestMembers(request, undefined, "/api/v1/models", "/api/v1/models", 200, 0.001));
    expect(l.key_id).toBe("key_abc");
    expect(l.project).toBe('team "[redacted]"');
  });
});

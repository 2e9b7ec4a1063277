// docs/CONTRACT.md §2 (CLI keys, bootstrap key) and §9 (signals): the real entry point
// `bun src/main.ts`, run as a child process.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ADMIN_KEY, chatLine, SERVE_READY, startTestServer, testDatabaseArgs, uploadRaw, type TestServer } from "./helpers/server";
import { cleanEnv, freePort } from "./helpers/env";

/** Response.json() typed loosely, for assertions. */
/** Children log errors only, unless a test says otherwise. */
const quietEnv = (extra: Record<string, string> = {}) => cleanEnv({ OFFPEAK_LOG_LEVEL: "error", ...extra });

const json = (res: Response): Promise<any> => res.json();

const ROOT = join(import.meta.dir, "..");
const MAIN = join(ROOT, "src/main.ts");
const KEY_LINE = /^sk-op-[0-9A-Za-z]{40}\n$/;

const tempDirs: string[] = [];
const children: Subprocess[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "offpeak-cli-test-"));
  tempDirs.push(d);
  return d;
}

/** The environment without any offpeak settings inherited from the caller. */
async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], { cwd: ROOT, env: quietEnv(env), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** Collects a child's stdout as it arrives, so a test can wait for a line. */
class Output {
  text = "";
  private waiters: (() => void)[] = [];
  constructor(stream: ReadableStream<Uint8Array>) {
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stream) {
        this.text += dec.decode(chunk, { stream: true });
        for (const w of this.waiters.splice(0)) w();
      }
      for (const w of this.waiters.splice(0)) w();
    })();
  }
  async waitFor(re: RegExp, timeoutMs = 60_000): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = re.exec(this.text);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${re} in stdout: ${JSON.stringify(this.text)}`);
      await Promise.race([new Promise<void>((r) => this.waiters.push(r)), Bun.sleep(100)]);
    }
  }
}

interface Served {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  out: Output;
  err: Output;
  url: string;
}

async function serve(dataDir: string, env: Record<string, string>): Promise<Served> {
  const port = await freePort();
  const proc = Bun.spawn([process.execPath, MAIN, "serve", "--port", String(port), "--host", "127.0.0.1", "--data-dir", dataDir], {
    cwd: ROOT,
    env: quietEnv(env),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  children.push(proc);
  const out = new Output(proc.stdout);
  const err = new Output(proc.stderr);
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, proc, () => err.text);
  return { proc, out, err, url };
}

async function waitHealthy(url: string, proc: Subprocess, stderr: () => string): Promise<void> {
  // A start takes a fraction of a second; a loaded machine may take many times that (the process exiting ends the wait at once).
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited early with ${proc.exitCode}: ${stderr()}`);
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.status === 200 && (await res.text()) === "ok") return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error("server did not become healthy");
    await Bun.sleep(50);
  }
}

/** Sends the signal and resolves with the exit code, or "still running" after 10 s (docs/CONTRACT.md §9). */
async function stopWith(proc: Subprocess, signal: NodeJS.Signals): Promise<number | string> {
  proc.kill(signal);
  const code = await Promise.race([proc.exited, Bun.sleep(10_000).then(() => "still running after 10 s")]);
  if (typeof code === "string") proc.kill("SIGKILL");
  return code;
}

afterAll(async () => {
  for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
  await Promise.all(children.map((p) => p.exited));
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

describe("offpeak keys … against the data dir of a running server", () => {
  let dataDir: string;
  let t: TestServer;
  /** The server's database when it is not the data dir's SQLite (OFFPEAK_TEST_DATABASE=postgres): `--database-url` and it. */
  let dbArgs: string[];
  /** The keys CLI against the server's data dir (and its database). */
  const keysCli = (args: string[]) => cli([...args, "--data-dir", dataDir, ...dbArgs]);

  beforeAll(async () => {
    dataDir = tempDir();
    t = await startTestServer({ dataDir });
    dbArgs = await testDatabaseArgs(dataDir);
  });
  afterAll(async () => {
    await t?.stop();
  });

  test("create prints the secret alone; it works at once; list shows it; revoke makes the next request 401", async () => {
    const created = await keysCli(["keys", "create", "--name", "x", "--scopes", "files:read"]);
    expect(created.stderr).toBe("");
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(KEY_LINE);
    const secret = created.stdout.trim();

    // Works against the running server immediately, with exactly its scope.
    expect((await t.api("/files", { key: secret })).status).toBe(200);
    const up = await uploadRaw(t, chatLine("a") + "\n", "batch", "a.jsonl", secret);
    expect(up.status).toBe(403);
    expect((await t.api("/keys", { key: secret })).status).toBe(403);

    // The server sees it too.
    const viaApi = (await json(await t.api("/keys"))).data.filter((k: any) => k.name === "x");
    expect(viaApi.length).toBe(1);
    expect(viaApi[0].scopes).toEqual(["files:read"]);
    expect(viaApi[0].project).toBe("default");

    const listed = await keysCli(["keys", "list"]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).not.toContain(secret);
    const row = listed.stdout
      .split("\n")
      .map((l) => l.split("\t"))
      .find((cols) => cols.includes(viaApi[0].id));
    expect(row).toBeDefined();
    expect(row).toContain("x");
    expect(row).toContain("files:read");
    expect(row).toContain("default");

    const revoked = await keysCli(["keys", "revoke", viaApi[0].id]);
    expect(revoked.code).toBe(0);
    const after = await t.api("/files", { key: secret });
    expect(after.status).toBe(401);
    expect(after.headers.get("www-authenticate")).toStartWith("Bearer");

    const listedAgain = await keysCli(["keys", "list"]);
    expect(listedAgain.stdout).not.toContain(viaApi[0].id);
  });

  test("create with default scopes and --project", async () => {
    const created = await keysCli(["keys", "create", "--name", "proj-key", "--project", "team-b"]);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(KEY_LINE);
    const secret = created.stdout.trim();
    const entry = (await json(await t.api("/keys"))).data.find((k: any) => k.name === "proj-key");
    expect(entry.project).toBe("team-b");
    expect([...entry.scopes].sort()).toEqual(["batches:read", "batches:write", "files:read", "files:write", "inference"]);
    // Its uploads live in team-b, invisible to project default.
    const up = await uploadRaw(t, chatLine("b") + "\n", "batch", "b.jsonl", secret);
    expect(up.status).toBe(200);
    const id = (await json(up)).id;
    expect((await t.api(`/files/${id}`, { key: secret })).status).toBe(200);
    expect((await t.api(`/files/${id}`)).status).toBe(404);
  });

  test("bad CLI input fails with a message on stderr, prints no secret and creates nothing", async () => {
    const before = (await json(await t.api("/keys"))).data.length;
    for (const args of [
      ["keys", "create", "--data-dir", dataDir],
      ["keys", "create", "--name", "bad", "--scopes", "files:read,root", "--data-dir", dataDir],
      // Given but empty: an error, as "scopes": [] is for the API (not the default scopes).
      ["keys", "create", "--name", "bad", "--scopes", "", "--data-dir", dataDir],
      ["keys", "create", "--name", "bad", "--scopes=", "--data-dir", dataDir],
      ["keys", "create", "--name", "bad", "--project", "no spaces allowed", "--data-dir", dataDir],
      ["keys", "revoke", "key_000000000000000000000000", "--data-dir", dataDir],
      ["keys", "revoke", "--data-dir", dataDir],
      ["keys", "frobnicate", "--data-dir", dataDir],
      // A value flag with no value, a typo'd flag, a data dir with no database (nothing may be created there).
      ["keys", "create", "--name", "bad", "--project", "--data-dir", dataDir],
      ["keys", "create", "--name", "bad", "--projcet", "p", "--data-dir", dataDir],
      ["keys", "list", "--data-dir"],
      ["keys", "list", "--data-dir", join(dataDir, "typo")],
      ["keys", "revoke", "key_000000000000000000000000", "--data-dir", join(dataDir, "typo")],
      ["serve", "--prot", "1", "--data-dir", join(dataDir, "typo")],
    ]) {
      // Those aimed at the server's data dir reach its database too.
      const r = await cli(args.at(-2) === "--data-dir" && args.at(-1) === dataDir ? [...args, ...dbArgs] : args);
      expect({ args, failed: r.code !== 0 }).toEqual({ args, failed: true });
      expect(r.stdout).not.toMatch(/sk-op-/);
      expect(r.stderr.length).toBeGreaterThan(0);
    }
    expect((await json(await t.api("/keys"))).data.length).toBe(before);
    expect(existsSync(join(dataDir, "typo"))).toBe(false);
    expect(existsSync(join(ROOT, "true"))).toBe(false);
  });
});

describe("offpeak serve", () => {
  test("SIGTERM → exit 0 within 10 s", async () => {
    const s = await serve(tempDir(), { OFFPEAK_ADMIN_KEY: ADMIN_KEY });
    // It serves for real before we stop it.
    const res = await fetch(`${s.url}/api/v1/files`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(res.status).toBe(200);
    expect(await stopWith(s.proc, "SIGTERM")).toBe(0);
  });

  test("SIGINT → exit 0 within 10 s, with data written", async () => {
    const dir = tempDir();
    const s = await serve(dir, { OFFPEAK_ADMIN_KEY: ADMIN_KEY });
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([chatLine("a") + "\n"]), "a.jsonl");
    const up = await fetch(`${s.url}/api/v1/files`, { method: "POST", body: form, headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(up.status).toBe(200);
    const id = (await json(up)).id;
    expect(await stopWith(s.proc, "SIGINT")).toBe(0);

    // The file survives the restart.
    const again = await serve(dir, { OFFPEAK_ADMIN_KEY: ADMIN_KEY });
    const got = await fetch(`${again.url}/api/v1/files/${id}/content`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(got.status).toBe(200);
    expect(await got.text()).toBe(chatLine("a") + "\n");
    expect(await stopWith(again.proc, "SIGTERM")).toBe(0);
  });

  test("first start without OFFPEAK_ADMIN_KEY prints an admin key once on stdout", async () => {
    const dir = tempDir();
    const s = await serve(dir, {});
    const m = await s.out.waitFor(/\bsk-op-[0-9A-Za-z]{40}\b/);
    const key = m[0];
    expect(s.out.text.match(/sk-op-[0-9A-Za-z]+/g)).toEqual([key]);
    // docs/CONTRACT.md §19: a banner for people says where the console, the API and the data are, and frames the key.
    await s.out.waitFor(SERVE_READY);
    const banner = s.out.text;
    expect(banner).toMatch(new RegExp(`^\\s*Console\\s+${s.url}/\\s*$`, "m"));
    expect(banner).toMatch(new RegExp(`^\\s*API base\\s+${s.url}/api/v1\\b`, "m"));
    expect(banner).toMatch(new RegExp(`^\\s*Data\\s+${dir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\s*$`, "m"));
    const keyLine = banner.split("\n").findIndex((l) => l.includes(key));
    const lines = banner.split("\n");
    expect(lines[keyLine]).toMatch(/^\s*│\s+sk-op-[0-9A-Za-z]{40}\s+│$/);
    expect(lines.slice(0, keyLine).some((l) => /^\s*┌─+┐$/.test(l))).toBe(true);
    expect(lines.slice(keyLine).some((l) => /^\s*└─+┘$/.test(l))).toBe(true);
    expect(banner).toMatch(/shown only this once/);

    // It is an admin key of project default.
    const auth = { authorization: `Bearer ${key}` };
    const keys = await fetch(`${s.url}/api/v1/keys`, { headers: auth });
    expect(keys.status).toBe(200);
    const made = await fetch(`${s.url}/api/v1/keys`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ name: "by-bootstrap" }) });
    expect(made.status).toBe(200);
    expect((await fetch(`${s.url}/api/v1/files`, { headers: auth })).status).toBe(200);
    // A wrong key is still refused (the bootstrap did not open the door).
    expect((await fetch(`${s.url}/api/v1/files`, { headers: { authorization: `Bearer sk-op-${"0".repeat(40)}` } })).status).toBe(401);
    expect(await stopWith(s.proc, "SIGTERM")).toBe(0);

    // A second start on the same data dir prints no key, and the first one still works.
    const again = await serve(dir, {});
    await again.out.waitFor(SERVE_READY);
    expect(again.out.text).not.toMatch(/sk-op-/);
    expect((await fetch(`${again.url}/api/v1/keys`, { headers: auth })).status).toBe(200);
    expect(await stopWith(again.proc, "SIGTERM")).toBe(0);
  });

  test("with OFFPEAK_ADMIN_KEY set, an empty data dir prints no key", async () => {
    const s = await serve(tempDir(), { OFFPEAK_ADMIN_KEY: ADMIN_KEY });
    await s.out.waitFor(SERVE_READY);
    expect(s.out.text).not.toMatch(/sk-op-/);
    expect(s.out.text).toMatch(/^\s*Admin key\s+OFFPEAK_ADMIN_KEY\s*$/m);
    expect(await stopWith(s.proc, "SIGTERM")).toBe(0);
  });

  test("a first start that cannot listen (port taken) still shows the key it made, and it works on the next start", async () => {
    const taken = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("busy") });
    const dir = tempDir();
    try {
      const proc = Bun.spawn([process.execPath, MAIN, "serve", "--port", String(taken.port), "--host", "127.0.0.1", "--data-dir", dir], {
        cwd: ROOT,
        env: quietEnv({}),
        stdout: "pipe",
        stderr: "pipe",
        stdin: "ignore",
      });
      children.push(proc);
      const [stdout, , code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      expect(code).not.toBe(0);
      const key = /│\s+(sk-op-[0-9A-Za-z]{40})\s+│/.exec(stdout)?.[1];
      expect(key).toBeDefined();
      expect(stdout).toContain("could not start");
      const s = await serve(dir, {});
      await s.out.waitFor(SERVE_READY);
      expect(s.out.text).not.toMatch(/sk-op-/);
      expect((await fetch(`${s.url}/api/v1/keys`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      expect(await stopWith(s.proc, "SIGTERM")).toBe(0);
    } finally {
      await taken.stop(true);
    }
  });

  test("stdout is the banner for people, once; stderr the JSON log lines, with one 'listening'", async () => {
    const s = await serve(tempDir(), { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "info" });
    await s.out.waitFor(SERVE_READY);
    await s.err.waitFor(/"msg":"listening"/);
    await fetch(`${s.url}/api/v1/files`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(await stopWith(s.proc, "SIGTERM")).toBe(0);
    // The banner names the console and the API base once each, and says nothing twice.
    expect(s.out.text.match(/API base/g)).toHaveLength(1);
    expect(s.out.text.match(/Console/g)).toHaveLength(1);
    expect(s.out.text).not.toMatch(/listening|^\{/m);
    const logLines = s.err.text.split("\n").filter(Boolean);
    const parsed = logLines.map((l) => JSON.parse(l) as { msg: string }); // every line is JSON
    expect(parsed.filter((l) => l.msg === "listening")).toHaveLength(1);
    expect(s.err.text.match(/listening/g)).toHaveLength(1);
  });
});

describe("OFFPEAK_ADMIN_KEY in GET /keys (docs/CONTRACT.md §19)", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer();
  });
  afterAll(async () => {
    await t?.stop();
  });

  test('listed first as source "env", admin of project default, its secret not shown', async () => {
    const made = await t.createKey({ name: "stored one" });
    const body = await json(await t.api("/keys"));
    expect(body.data[0]).toEqual({
      id: "key_env_admin",
      object: "api_key",
      name: "OFFPEAK_ADMIN_KEY",
      project: "default",
      scopes: ["admin"],
      rate_limits: { rpm: null, tpm: null },
      created_at: null,
      prefix: ADMIN_KEY.slice(0, 10),
      source: "env",
    });
    expect(body.data.slice(1).every((k: any) => k.source === "db")).toBe(true);
    expect(JSON.stringify(body)).not.toContain(ADMIN_KEY);
    expect(JSON.stringify(body)).not.toContain(made);
    // GET /me names the same key.
    expect((await json(await t.api("/me"))).id).toBe("key_env_admin");
  });

  test("DELETE /keys/key_env_admin is refused with 409 saying why; the key keeps working", async () => {
    const res = await t.api("/keys/key_env_admin", { method: "DELETE" });
    expect(res.status).toBe(409);
    const err = (await json(res)).error;
    expect(err).toMatchObject({ type: "conflict_error", code: "invalid_state", param: "id" });
    expect(err.message).toContain("OFFPEAK_ADMIN_KEY");
    expect(err.message).toMatch(/restart/);
    expect((await t.api("/files")).status).toBe(200);
    expect((await json(await t.api("/keys"))).data[0].id).toBe("key_env_admin");
    // The keys CLI says the same, and changes nothing.
    const r = await cli(["keys", "revoke", "key_env_admin", "--data-dir", t.dataDir, ...(await testDatabaseArgs(t.dataDir))]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("OFFPEAK_ADMIN_KEY");
  });

  test("a short chosen key shows at most a quarter of itself as its prefix", async () => {
    const short = await startTestServer({ env: { OFFPEAK_ADMIN_KEY: "sk-my-admin-key" } });
    try {
      const res = await fetch(`${short.base}/keys`, { headers: { authorization: "Bearer sk-my-admin-key" } });
      expect((await json(res)).data[0]).toMatchObject({ id: "key_env_admin", prefix: "sk-", source: "env" });
    } finally {
      await short.stop();
    }
  });
});

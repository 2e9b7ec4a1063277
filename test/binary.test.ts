// docs/CONTRACT.md §9: one compiled executable serves everything, with no node_modules,
// no source tree and no migrations folder beside it. Builds it with the same
// `bun build --compile` command as package.json's build script (into a temp
// dir, so the working tree is not touched), copies it ALONE into an empty
// folder and runs it there.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ADMIN_KEY, chatLine } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";
import { cleanEnv, freePort } from "./helpers/env";

/** Response.json() typed loosely, for assertions. */
/** Children log errors only, and see no Bun or Node settings of the test process (the executable carries its own runtime). */
const binaryEnv = (extra: Record<string, string> = {}) => cleanEnv({ OFFPEAK_LOG_LEVEL: "error", ...extra }, (k) => k.startsWith("BUN_") || k === "NODE_PATH");

const json = (res: Response): Promise<any> => res.json();

const ROOT = join(import.meta.dir, "..");
let buildDir: string;
let runDir: string;
let binary: string;
let proc: Subprocess<"ignore", "pipe", "pipe"> | null = null;
let url: string;

/** package.json's compile step, with the output redirected to `outfile`. */
function compileCommand(outfile: string): string[] {
  const pkg = JSON.parse(require("node:fs").readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: { build: string } };
  const step = pkg.scripts.build
    .split("&&")
    .map((s) => s.trim())
    .find((s) => s.startsWith("bun build"));
  if (!step || !step.includes("--compile")) throw new Error(`no 'bun build --compile' step in the build script: ${pkg.scripts.build}`);
  const args = step.split(/\s+/).slice(1);
  const i = args.indexOf("--outfile");
  if (i === -1) throw new Error("the build step has no --outfile");
  args[i + 1] = outfile;
  return [process.execPath, ...args];
}

const auth = { authorization: `Bearer ${ADMIN_KEY}` };

beforeAll(async () => {
  buildDir = mkdtempSync(join(tmpdir(), "offpeak-build-"));
  runDir = mkdtempSync(join(tmpdir(), "offpeak-bin-"));
  const built = join(buildDir, "offpeak");
  const build = Bun.spawn(compileCommand(built), { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [out, err, code] = await Promise.all([new Response(build.stdout).text(), new Response(build.stderr).text(), build.exited]);
  if (code !== 0) throw new Error(`build failed (${code}):\n${out}\n${err}`);

  binary = join(runDir, "offpeak");
  copyFileSync(built, binary);
  chmodSync(binary, 0o755);
  rmSync(buildDir, { recursive: true, force: true });
}, SCENARIO_MS);

afterAll(async () => {
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    proc.kill("SIGKILL");
    await proc.exited;
  }
  rmSync(runDir, { recursive: true, force: true });
  if (existsSync(buildDir)) rmSync(buildDir, { recursive: true, force: true });
});

test("the executable runs alone in an empty folder: upload, validate, download byte-identical, SIGTERM → 0", async () => {
  expect(readdirSync(runDir)).toEqual(["offpeak"]);

  const port = await freePort();
  proc = Bun.spawn([binary, "--port", String(port)], { cwd: runDir, env: binaryEnv({ OFFPEAK_ADMIN_KEY: ADMIN_KEY }), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`binary exited with ${proc.exitCode}: ${await new Response(proc.stderr).text()}`);
    const ok = await fetch(`${url}/healthz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) throw new Error("binary did not become healthy");
    await Bun.sleep(50);
  }

  // The data dir defaults to ./data beside it, migrations applied from inside the binary.
  expect(existsSync(join(runDir, "data", "offpeak.db"))).toBe(true);

  // A batch file with multi-byte text, CRLF and blank lines, uploaded and read back exactly.
  const text = [chatLine("a", "héllo 🙂"), "", chatLine("b"), chatLine("c", "x".repeat(5000))].join("\r\n") + "\n";
  const bytes = new TextEncoder().encode(text);
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", new Blob([bytes]), "input.jsonl");
  const up = await fetch(`${url}/api/v1/files`, { method: "POST", body: form, headers: auth });
  expect(up.status).toBe(200);
  const file = await json(up);
  expect(file.bytes).toBe(bytes.length);
  expect(file.status).toBe("processed");

  const down = await fetch(`${url}/api/v1/files/${file.id}/content`, { headers: auth });
  expect(down.status).toBe(200);
  expect(down.headers.get("content-length")).toBe(String(bytes.length));
  expect(new Uint8Array(await down.arrayBuffer())).toEqual(bytes);

  // The validator worker is embedded too: a bad batch file is refused with its line number.
  const bad = new FormData();
  bad.append("purpose", "batch");
  bad.append("file", new Blob([chatLine("a") + "\n" + chatLine("a") + "\n"]), "dup.jsonl");
  const rej = await fetch(`${url}/v1/files`, { method: "POST", body: bad, headers: auth });
  expect(rej.status).toBe(400);
  const err = (await json(rej)).error;
  expect(err.code).toBe("duplicate_custom_id");
  expect(err.message).toMatch(/\bline 2\b/);

  // A message batch's create reads its requests in a Worker of its own: embedded too. One made and one refused, naming the request.
  const mb = (requests: unknown[]) => fetch(`${url}/v1/messages/batches`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ requests }) });
  const mreq = (id: string) => ({ custom_id: id, params: { model: "offpeak-echo", max_tokens: 5, messages: [{ role: "user", content: `hi ${id}` }] } });
  const made = await mb([mreq("m1"), mreq("m2")]);
  expect(made.status).toBe(200);
  expect((await json(made)).request_counts.processing).toBe(2);
  const refusedMb = await mb([mreq("m1"), mreq("m1")]);
  expect(refusedMb.status).toBe(400);
  expect((await json(refusedMb)).error.message).toMatch(/requests\.1\.custom_id: duplicate/);

  // No key → 401, and /docs is served from the binary.
  expect((await fetch(`${url}/api/v1/files`)).status).toBe(401);
  expect((await fetch(`${url}/docs`)).status).toBe(200);

  // The web console is inside too: its page, and every script and style it names (docs/CONTRACT.md §15).
  const page = await fetch(`${url}/`);
  expect(page.status).toBe(200);
  expect(page.headers.get("content-type")).toMatch(/^text\/html/);
  const html = await page.text();
  const assets = [...html.matchAll(/(?:src|href)="\.?\/([^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
  expect(assets.some((a) => a.endsWith(".js")) && assets.some((a) => a.endsWith(".css"))).toBe(true);
  for (const a of assets) {
    const res = await fetch(`${url}/${a}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(a.endsWith(".js") ? /^text\/javascript/ : /^text\/css/);
    if (a.endsWith(".js")) expect(await res.text()).toContain("offpeak.key");
  }
  expect((await fetch(`${url}/api/v1/me`, { headers: auth })).status).toBe(200);

  // The keys CLI of the same binary works on the running server's data dir.
  const cli = Bun.spawn([binary, "keys", "create", "--name", "from-binary", "--scopes", "files:read"], { cwd: runDir, env: binaryEnv(), stdout: "pipe", stderr: "pipe" });
  const [secretOut, , cliCode] = await Promise.all([new Response(cli.stdout).text(), new Response(cli.stderr).text(), cli.exited]);
  expect(cliCode).toBe(0);
  expect(secretOut).toMatch(/^sk-op-[0-9A-Za-z]{40}\n$/);
  expect((await fetch(`${url}/api/v1/files/${file.id}`, { headers: { authorization: `Bearer ${secretOut.trim()}` } })).status).toBe(200);

  // Nothing but the executable and its data dir appeared beside it.
  expect(readdirSync(runDir).sort()).toEqual(["data", "offpeak"]);

  proc.kill("SIGTERM");
  const code = await Promise.race([proc.exited, Bun.sleep(10_000).then(() => "still running after 10 s")]);
  expect(code).toBe(0);
}, SCENARIO_MS);

test("with front threads (server.http_threads): the executable's front Workers answer chat completions and relay the rest; SIGTERM → 0", async () => {
  const upstream = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      if (req.method === "GET") return Response.json({ object: "list", data: [{ id: "up-chat", object: "model", created: 0, owned_by: "t" }] });
      const body = (await req.json()) as { model: string };
      return Response.json({ id: "c", object: "chat.completion", created: 1, model: body.model, choices: [{ index: 0, message: { role: "assistant", content: "from upstream" }, finish_reason: "stop" }] });
    },
  });
  const port = await freePort();
  const dataDir = join(runDir, "data-fronts");
  const p = Bun.spawn([binary, "--port", String(port), "--data-dir", dataDir], {
    cwd: runDir,
    env: binaryEnv({ OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_HTTP_THREADS: "2", OFFPEAK_UPSTREAM_URL: `http://127.0.0.1:${upstream.port}/v1` }),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 20_000;
    while (!(await fetch(`${base}/healthz`).then((r) => r.status === 200, () => false))) {
      if (p.exitCode !== null) throw new Error(`binary exited with ${p.exitCode}: ${await new Response(p.stderr).text()}`);
      if (Date.now() > deadline) throw new Error("binary did not become healthy");
      await Bun.sleep(50);
    }
    const ask = (model: string) =>
      fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json", connection: "close" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }) });
    for (let i = 0; i < 4; i++) expect(((await (await ask("up-chat")).json()) as any).choices[0].message.content).toBe("from upstream");
    expect(((await (await ask("offpeak-echo")).json()) as any).choices[0].message.content).toBe("hi");
    const metrics = await (await fetch(`${base}/api/v1/metrics`, { headers: auth })).text();
    const answered = [...metrics.matchAll(/^offpeak_http_front_requests_total\{thread="\d+"\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
    expect(answered).toBe(4);
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([chatLine("a") + "\n"]), "in.jsonl");
    const file = await json(await fetch(`${base}/v1/files`, { method: "POST", body: form, headers: auth }));
    const down = await fetch(`${base}/v1/files/${file.id}/content`, { headers: auth });
    expect(down.headers.get("content-length")).toBe(String(file.bytes));
    expect(await down.text()).toBe(chatLine("a") + "\n");
    expect(existsSync(join(dataDir, "relay.sock"))).toBe(true);
    p.kill("SIGTERM");
    expect(await Promise.race([p.exited, Bun.sleep(10_000).then(() => "still running after 10 s")])).toBe(0);
    expect(existsSync(join(dataDir, "relay.sock"))).toBe(false);
  } finally {
    if (p.exitCode === null) p.kill("SIGKILL");
    upstream.stop(true);
  }
}, SCENARIO_MS);

// docs/CONTRACT.md §16, least exposure on disk: the data directory is created 0700 and
// every file in it is 0600 (database, WAL, uploads, parts, outputs), whatever
// the umask offpeak was started with; a data directory left open by an older
// version is tightened at start, by `serve` and by `keys`. Real processes
// (`bun src/main.ts …`): the umask is the process's, so a server in this
// process would set it for the test too.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { chatReq, createBatch, pollUntil, waitBatch } from "./helpers/batches";
import { ChildServer, childEnv, killChildren } from "./helpers/child";
import { configWriter } from "./helpers/inference";
import { SCENARIO_MS } from "./helpers/wait";

const MAIN = join(import.meta.dir, "..", "src", "main.ts");
const cfg = configWriter("offpeak-modes-");
let root: string;
let umaskBefore: number;

beforeAll(() => {
  // What most shells start with: new files 0644, new directories 0755. Children inherit it.
  umaskBefore = process.umask(0o022);
  root = mkdtempSync(join(tmpdir(), "offpeak-modes-"));
});
afterAll(async () => {
  await killChildren();
  process.umask(umaskBefore);
  rmSync(root, { recursive: true, force: true });
  cfg.cleanup();
});

/** Every path under `dir` (itself included) with its permission bits, as "path 0644". */
function walk(dir: string): { path: string; mode: number; isDir: boolean }[] {
  const out: { path: string; mode: number; isDir: boolean }[] = [];
  const visit = (p: string) => {
    const st = lstatSync(p);
    out.push({ path: relative(dir, p) || ".", mode: st.mode & 0o777, isDir: st.isDirectory() });
    if (st.isDirectory()) for (const name of readdirSync(p)) visit(join(p, name));
  };
  visit(dir);
  return out;
}

/** The paths whose mode is not 0700 (directories) or 0600 (files), for a readable failure. */
const tooOpen = (entries: ReturnType<typeof walk>) => entries.filter((e) => e.mode !== (e.isDir ? 0o700 : 0o600)).map((e) => `${e.path} ${e.mode.toString(8)}`);

/** Every directory 0755 and every file 0644: a data directory as an older version left it. */
function loosen(dir: string) {
  for (const e of walk(dir)) chmodSync(join(dir, e.path), e.isDir ? 0o755 : 0o644);
}

async function cli(args: string[]) {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], { env: childEnv({ OFFPEAK_LOG_LEVEL: "error" }), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** Uploads a file and runs a batch of `n` lines (every 4th refused: an error file too) to the end; returns its files' ids. */
async function runBatch(server: ChildServer, dataDir: string, n: number) {
  const reqs = Array.from({ length: n }, (_, i) => (i % 4 === 0 ? chatReq(`m-${i}`, "bad", { n: 0 }) : chatReq(`m-${i}`, `line ${i}`)));
  const { batch } = await createBatch(server.client, reqs);
  // While it runs: its working directory (part files, checkpoints) is there too.
  const running = await pollUntil(
    async () => walk(dataDir),
    (entries) => entries.some((e) => e.path.startsWith(`batches/${batch.id}/`)),
    20_000,
    10,
    "the batch's part files",
  );
  const done = await waitBatch(server.client, batch.id, ["completed"], 60_000);
  expect(done.output_file_id).toBeTruthy();
  expect(done.error_file_id).toBeTruthy();
  // Read back through the server: the output is served from its parts.
  expect((await server.api(`/files/${done.output_file_id}/content`)).status).toBe(200);
  return { running, batch: done };
}

describe("file modes in the data directory", () => {
  test("a new data directory is 0700 and everything in it 0700/0600: database, WAL, uploads, parts, outputs", async () => {
    const dataDir = join(root, "fresh", "data"); // not there yet: the server creates it
    // 4 lines at a time, 20 ms each: 200 lines run for about a second.
    const config = cfg.write("slow.json", { models: { "offpeak-echo": { latency_ms: 20, max_concurrency: 4 } } });
    const server = await ChildServer.start({ dataDir, args: ["--config", config], env: { OFFPEAK_BATCH_WORKERS: "2" } });
    const { running, batch } = await runBatch(server, dataDir, 200);
    const whileRunning = running.map((e) => e.path);
    expect(whileRunning.some((p) => /^batches\/batch_\w+\/out-\d+\.jsonl$/.test(p))).toBe(true);
    expect(tooOpen(running)).toEqual([]);

    const open = walk(dataDir);
    const paths = open.map((e) => e.path);
    // What the check covers, while the server still has the database open.
    for (const p of ["offpeak.db", "offpeak.db-wal", "offpeak.db-shm", `files/${batch.input_file_id}`]) expect(paths).toContain(p);
    expect(paths.some((p) => p.startsWith(`files/${batch.output_file_id}.parts/`) || p === `files/${batch.output_file_id}`)).toBe(true);
    expect(paths.some((p) => p.startsWith(`files/${batch.error_file_id}`))).toBe(true);
    expect(tooOpen(open)).toEqual([]);

    expect(await server.stop("SIGTERM")).toBe(0);
    expect(tooOpen(walk(dataDir))).toEqual([]);
  }, SCENARIO_MS);

  test("a data directory left open by an older version is tightened at start (serve and keys), with a log line", async () => {
    const dataDir = join(root, "old", "data");
    const first = await ChildServer.start({ dataDir });
    await runBatch(first, dataDir, 20);
    expect(await first.stop("SIGTERM")).toBe(0);

    // `keys list` (it only reads) tightens it before it opens the database.
    loosen(dataDir);
    const listed = await cli(["keys", "list", "--data-dir", dataDir]);
    expect(listed.code).toBe(0);
    expect(listed.stderr).toContain(`${dataDir} was open to other users (0755): tightened`);
    expect(listed.stderr).toContain(`${join(dataDir, "offpeak.db")} was open to other users (0644): tightened`);
    const top = walk(dataDir).filter((e) => !e.path.includes("/"));
    expect(tooOpen(top)).toEqual([]);

    // So does `serve`, and what it creates from then on is 0600.
    loosen(dataDir);
    const again = await ChildServer.start({ dataDir });
    expect(tooOpen(walk(dataDir).filter((e) => !e.path.includes("/")))).toEqual([]);
    await pollUntil(async () => again.stderr, (s) => s.includes("tightened"), 5000, 20, "the log line");
    const line = JSON.parse(again.stderr.split("\n").find((l) => l.includes("tightened"))!);
    expect(line.paths).toContainEqual(`${dataDir} (was 0755)`);
    expect(line.paths).toContainEqual(`${join(dataDir, "offpeak.db")} (was 0644)`);
    const { batch } = await runBatch(again, dataDir, 20);
    const created = walk(dataDir).filter((e) => e.path.startsWith(`files/${batch.output_file_id}`) || e.path.startsWith(`files/${batch.input_file_id}`));
    expect(created.length).toBeGreaterThan(0);
    expect(tooOpen(created)).toEqual([]);
    expect(await again.stop("SIGTERM")).toBe(0);
  }, SCENARIO_MS);
});

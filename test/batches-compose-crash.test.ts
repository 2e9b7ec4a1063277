// A SIGKILL during finalize (issue 11): finalize moves the shards' part files
// into the store and then writes the records in one transaction; a crash at
// any step must leave something a restart finishes into the same correct
// files. A child-process server runs a batch of several shards with the
// finalize test hook (OFFPEAK_TEST_FINALIZE_PAUSE_MS, src/batches/finalize.ts:
// it logs each step and waits there), is killed at a chosen step, and is
// restarted without the hook on the same data dir. The batch must complete
// with each custom_id exactly once, in input order, the content must equal
// its parts on disk, and nothing may be left over.
import { afterAll, describe, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Database } from "bun:sqlite";
import OpenAI from "openai";
import { chatReq, createBatch, pollUntil, waitBatch } from "./helpers/batches";
import { ADMIN_KEY } from "./helpers/server";

const ROOT = resolve(import.meta.dir, "..");
const MAIN = join(ROOT, "src", "main.ts");
const tmp = mkdtempSync(join(tmpdir(), "offpeak-compose-crash-"));
const children: Subprocess[] = [];

afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  rmSync(tmp, { recursive: true, force: true });
});

function childEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("OFFPEAK_") && k !== "PORT" && k !== "HOST") env[k] = v;
  return { ...env, OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "info", OFFPEAK_BATCH_WORKERS: "2", ...extra };
}

class Child {
  stdout = "";
  stderr = "";
  client!: OpenAI;
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;

  constructor(dataDir: string, env: Record<string, string>) {
    this.proc = Bun.spawn([process.execPath, MAIN, "serve", "--port", "0", "--host", "127.0.0.1", "--data-dir", dataDir], {
      cwd: ROOT,
      env: childEnv(env),
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    children.push(this.proc);
    void this.collect(this.proc.stdout, (s) => (this.stdout += s));
    void this.collect(this.proc.stderr, (s) => (this.stderr += s));
  }

  private async collect(stream: ReadableStream<Uint8Array>, add: (s: string) => void) {
    const dec = new TextDecoder();
    for await (const chunk of stream) add(dec.decode(chunk, { stream: true }));
  }

  static async start(dataDir: string, env: Record<string, string> = {}): Promise<Child> {
    const c = new Child(dataDir, env);
    const m = await pollUntil(
      async () => {
        if (c.proc.exitCode !== null) throw new Error(`server exited with ${c.proc.exitCode}: ${c.stderr}`);
        return /offpeak listening on (http:\/\/\S+)/.exec(c.stdout);
      },
      (m) => m !== null,
      20_000,
      25,
      "the server to listen",
    );
    c.client = new OpenAI({ apiKey: ADMIN_KEY, baseURL: `${m![1]!}/api/v1`, maxRetries: 0 });
    return c;
  }

  /** The finalize steps logged so far (the test hook's lines). */
  steps(): { step: string; kind?: string; idx?: number }[] {
    return this.stderr
      .split("\n")
      .filter((l) => l.includes('"batch finalize step"'))
      .map((l) => JSON.parse(l));
  }
}

// ≈4.2 kB a line: 4,000 lines ≈ 17 MB → 5 shards; every 89th line is
// refused by the echo model (n: 0), so both files have several parts.
const N = 4000;
const PAD = "lorem ipsum ".repeat(340);
const bad = (i: number) => i % 89 === 3;

function batchLines(prefix: string) {
  const ids = Array.from({ length: N }, (_, i) => `${prefix}-${i}`);
  return { ids, text: ids.map((id, i) => chatReq(id, `${id} ${PAD}`, bad(i) ? { n: 0 } : {})) };
}

const customIds = (text: string) =>
  text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l).custom_id as string);

/** Runs a batch, SIGKILLs the server when `killAt` holds for the logged steps, restarts, and checks the result. */
async function crashDuringFinalize(name: string, killAt: (steps: ReturnType<Child["steps"]>) => boolean) {
  const dataDir = join(tmp, name);
  const { ids, text } = batchLines(name);
  const first = await Child.start(dataDir, { OFFPEAK_TEST_FINALIZE_PAUSE_MS: "1500" });
  const { batch } = await createBatch(first.client, text);
  await pollUntil(async () => first.steps(), killAt, 60_000, 10, `finalize to reach the kill point (${name})`);
  first.proc.kill("SIGKILL");
  await first.proc.exited;
  const stepsAtKill = first.steps();

  // Still finalizing: the transaction that ends it did not run.
  const db = new Database(join(dataDir, "offpeak.db"), { readonly: true });
  const row = db.query<{ status: string }, [string]>("SELECT status FROM batches WHERE id = ?").get(batch.id)!;
  db.close();
  expect(row.status).toBe("finalizing");

  const second = await Child.start(dataDir);
  try {
    const done = await waitBatch(second.client, batch.id, undefined, 60_000);
    expect(done.status).toBe("completed");
    const nBad = ids.filter((_, i) => bad(i)).length;
    expect(done.request_counts).toEqual({ total: N, completed: N - nBad, failed: nBad });
    const out = await (await second.client.files.content(done.output_file_id!)).text();
    const err = await (await second.client.files.content(done.error_file_id!)).text();
    // Each custom_id once, in input order (the echo model keeps a shard's order; parts go in shard order).
    expect(customIds(out)).toEqual(ids.filter((_, i) => !bad(i)));
    expect(customIds(err)).toEqual(ids.filter((_, i) => bad(i)));
    // Byte-identical to the parts on disk in order (what the old finalize concatenated).
    const check = new Database(join(dataDir, "offpeak.db"), { readonly: true });
    for (const [id, body] of [
      [done.output_file_id!, out],
      [done.error_file_id!, err],
    ] as const) {
      const parts = check.query<{ key: string; bytes: number }, [string]>("SELECT key, bytes FROM file_parts WHERE file_id = ? ORDER BY idx").all(id);
      expect(parts.length).toBeGreaterThan(1);
      const disk = Buffer.concat(parts.map((p) => readFileSync(join(dataDir, "files", p.key))));
      expect(disk.equals(Buffer.from(body))).toBe(true);
      expect(readdirSync(join(dataDir, "files", `${id}.parts`)).length).toBe(parts.length);
    }
    check.close();
    // Nothing left over: the working directory, temp files, the trash (emptied at start and after).
    expect(existsSync(join(dataDir, "batches", batch.id))).toBe(false);
    expect(readdirSync(join(dataDir, "tmp"))).toEqual([]);
    await pollUntil(async () => readdirSync(join(dataDir, "trash")), (l) => l.length === 0, 10_000, 25, "the trash to empty");
  } finally {
    second.proc.kill("SIGTERM");
    await second.proc.exited;
  }
  return stepsAtKill;
}

describe("SIGKILL during finalize, then restart", () => {
  test("killed after some parts moved: the restart moves the rest and the files are exact", async () => {
    const steps = await crashDuringFinalize("mid-adoption", (s) => s.filter((x) => x.step === "part adopted").length >= 3);
    // Really midway: output parts moved, not all of them (and no error part).
    expect(steps.every((x) => x.step === "part adopted" && x.kind === "out")).toBe(true);
  }, 120_000);

  test("killed after the parts are durable and the working directory is gone, before the commit", async () => {
    const steps = await crashDuringFinalize("before-commit", (s) => s.some((x) => x.step === "leftovers discarded"));
    expect(steps.some((x) => x.step === "part adopted" && x.kind === "err")).toBe(true);
  }, 120_000);
});

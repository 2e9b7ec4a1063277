// A SIGKILL during finalize: finalize moves the shards' part files
// into the store and then writes the records in one transaction; a crash at
// any step must leave something a restart finishes into the same correct
// files. A child-process server runs a batch of several shards with the
// finalize test hook (OFFPEAK_TEST_FINALIZE_PAUSE_MS, src/batches/finalize.ts:
// it logs each step and waits there), is killed at a chosen step, and is
// restarted without the hook on the same data dir. The batch must complete
// with each custom_id exactly once, in input order, the content must equal
// its parts on disk, and nothing may be left over.
import { afterAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { chatReq, createBatch, pollUntil, waitBatch } from "./helpers/batches";
import { ChildServer, killChildren } from "./helpers/child";
import { testDatabaseArgs } from "./helpers/server";
import { SCENARIO_MS } from "./helpers/wait";

const tmp = mkdtempSync(join(tmpdir(), "offpeak-compose-crash-"));

afterAll(async () => {
  await killChildren();
  rmSync(tmp, { recursive: true, force: true });
});

/** A server on `dataDir` (SQLite there, or its own Postgres database under OFFPEAK_TEST_DATABASE=postgres: the same one on a restart). */
const start = async (dataDir: string, env: Record<string, string> = {}) =>
  ChildServer.start({ dataDir, args: await testDatabaseArgs(dataDir), env: { OFFPEAK_LOG_LEVEL: "info", OFFPEAK_BATCH_WORKERS: "2", ...env } });

type Step = { step: string; kind?: string; idx?: number };

/** The finalize steps `c` logged so far (the test hook's lines). */
function steps(c: ChildServer): Step[] {
  return c.stderr
    .split("\n")
    .filter((l) => l.includes('"batch finalize step"'))
    .map((l) => JSON.parse(l));
}

/**
 * Rows of `sql` (`?` placeholders) read straight from the database of the
 * server on `dataDir`, whether or not it runs: offpeak.db in the data dir, or
 * under OFFPEAK_TEST_DATABASE=postgres the Postgres database testDatabaseArgs
 * gave it (the table and column names are the same in both schemas).
 */
async function queryDb<T>(dataDir: string, sql: string, ...params: string[]): Promise<T[]> {
  const args = await testDatabaseArgs(dataDir);
  if (args.length === 0) {
    const db = new Database(join(dataDir, "offpeak.db"), { readonly: true });
    try {
      return db.query<T, string[]>(sql).all(...params);
    } finally {
      db.close();
    }
  }
  const pg = new SQL({ url: args[1]!, max: 1 });
  try {
    let n = 0;
    return [...(await pg.unsafe(sql.replace(/\?/g, () => `$${++n}`), params))] as T[];
  } finally {
    await pg.close();
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
async function crashDuringFinalize(name: string, killAt: (steps: Step[]) => boolean) {
  const dataDir = join(tmp, name);
  const { ids, text } = batchLines(name);
  const first = await start(dataDir, { OFFPEAK_TEST_FINALIZE_PAUSE_MS: "1500" });
  const { batch } = await createBatch(first.client, text);
  await pollUntil(async () => steps(first), killAt, 60_000, 10, `finalize to reach the kill point (${name})`);
  first.proc.kill("SIGKILL");
  await first.proc.exited;
  const stepsAtKill = steps(first);

  // Still finalizing: the transaction that ends it did not run.
  const [row] = await queryDb<{ status: string }>(dataDir, "SELECT status FROM batches WHERE id = ?", batch.id);
  expect(row!.status).toBe("finalizing");

  const second = await start(dataDir);
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
    for (const [id, body] of [
      [done.output_file_id!, out],
      [done.error_file_id!, err],
    ] as const) {
      const parts = await queryDb<{ key: string; bytes: number }>(dataDir, "SELECT key, bytes FROM file_parts WHERE file_id = ? ORDER BY idx", id);
      expect(parts.length).toBeGreaterThan(1);
      const disk = Buffer.concat(parts.map((p) => readFileSync(join(dataDir, "files", p.key))));
      expect(disk.equals(Buffer.from(body))).toBe(true);
      expect(readdirSync(join(dataDir, "files", `${id}.parts`)).length).toBe(parts.length);
    }
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
  }, SCENARIO_MS);

  test("killed after the parts are durable and the working directory is gone, before the commit", async () => {
    const steps = await crashDuringFinalize("before-commit", (s) => s.some((x) => x.step === "leftovers discarded"));
    expect(steps.some((x) => x.step === "part adopted" && x.kind === "err")).toBe(true);
  }, SCENARIO_MS);
});

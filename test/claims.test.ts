// Claiming pending shards (src/db/claims.ts) takes at most as many as asked,
// on both databases: on Postgres a subquery with LIMIT … FOR UPDATE SKIP
// LOCKED inside `WHERE … IN (…)` can run more than once and claim more (a
// node with one Worker once held 6 shards, 5 of them never run).
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import { openDb, type Db } from "../src/db/client";
import { claimShards } from "../src/db/claims";
import { startPostgres } from "./helpers/postgres";

const dir = mkdtempSync(join(tmpdir(), "offpeak-claims-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function seed(db: Db, shards: number) {
  const now = Math.floor(Date.now() / 1000);
  await db.insert(db.t.batches).values({ id: "batch_a", project: "p", endpoint: "/v1/chat/completions", inputFileId: "file-a", completionWindow: "24h", status: "in_progress", createdAt: now, expiresAt: now + 3600 });
  await db.insert(db.t.batchShards).values(Array.from({ length: shards }, (_, idx) => ({ batchId: "batch_a", idx, startByte: idx, endByte: idx + 1, status: "pending" })));
}

for (const kind of ["sqlite", "postgres"] as const)
  test(`${kind}: at most the number asked for, in shard order, each counted as a claim`, async () => {
    const db = await openDb(kind === "sqlite" ? { kind, path: join(dir, "c.db") } : { kind, url: await (await startPostgres()).createDatabase() });
    try {
      await seed(db, 12);
      const s = db.t.batchShards;
      for (const n of [1, 1, 3, 2]) {
        const got = await claimShards(db, `owner-${n}`, Date.now() + 10_000, n);
        expect(got.length).toBe(n);
        for (const g of got) expect(g.shard.claims).toBe(1);
      }
      const running = await db.select({ idx: s.idx }).from(s).where(eq(s.status, "running"));
      expect(running.map((r) => r.idx).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    } finally {
      await db.close();
    }
  });

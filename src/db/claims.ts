// Claiming batch work (docs/CONTRACT.md §14, §18): a claim makes pending shards of
// running batches (in_progress or cancelling) `running` under a lease for
// one owner, and counts the run (claims + 1: its checkpoints and its part
// object are named for it).
//
// Which shard goes next follows the batch order (scheduling/order.ts): the
// earliest deadline hour, then the project with fewest shards running, then
// its batch with fewest running, then the oldest. The running counts come
// from the rows, so every node of a cluster follows one order: a project's
// turn is "it holds fewer Workers than the others", cluster-wide.
//
// Both dialects: the candidate batches (with a pending shard) are read with
// their running counts, then each pick is taken with one update of the
// batch's lowest pending shard that only succeeds if it is still pending, so
// nodes claiming at once never take the same shard (on Postgres the loser's
// update re-reads the row after the winner commits and matches nothing; it
// then tries that batch's next shard).
import { and, eq, inArray, sql } from "drizzle-orm";
import { bucketOf, nextCandidate } from "../scheduling/order";
import { shardClaimed } from "../batches/shardStatus";
import type { BatchRow, ShardRow } from "./schema";
import type { Db } from "./client";

export interface ClaimedShard {
  shard: ShardRow;
  batch: BatchRow;
}

const RUNNABLE = ["in_progress", "cancelling"];

export async function claimShards(db: Db, owner: string, until: number, limit: number, hourSeconds = 3600): Promise<ClaimedShard[]> {
  if (limit <= 0) return [];
  const { batchShards: s, batches: b } = db.t;
  const rows = await db
    .select({
      batch: b,
      running: sql<number>`(SELECT count(*) FROM ${s} WHERE ${s.batchId} = ${b.id} AND ${s.status} = 'running')`.mapWith(Number),
    })
    .from(b)
    .where(and(inArray(b.status, RUNNABLE), sql`EXISTS (SELECT 1 FROM ${s} WHERE ${s.batchId} = ${b.id} AND ${s.status} = 'pending')`));
  const cands = rows.map((r) => ({ batch: r.batch, running: r.running, bucket: bucketOf(r.batch.expiresAt, hourSeconds), project: r.batch.project, seq: r.batch.seq }));
  const byProject = new Map<string, number>();
  for (const c of cands) byProject.set(c.project, (byProject.get(c.project) ?? 0) + c.running);
  const out: ClaimedShard[] = [];
  while (out.length < limit && cands.length > 0) {
    const i = nextCandidate(cands, byProject);
    const c = cands[i]!;
    const taken = await takeNext(db, c.batch.id, owner, until);
    if (!taken) {
      cands.splice(i, 1); // no pending shard left (or others took them meanwhile)
      continue;
    }
    c.running++;
    byProject.set(c.project, (byProject.get(c.project) ?? 0) + 1);
    out.push({ shard: taken, batch: c.batch });
  }
  return out;
}

/** Takes a batch's lowest pending shard; tries the next one a few times if another node took it meanwhile. */
async function takeNext(db: Db, batchId: string, owner: string, until: number): Promise<ShardRow | null> {
  const s = db.t.batchShards;
  for (let tries = 0; tries < 4; tries++) {
    const [next] = await db
      .select({ idx: s.idx })
      .from(s)
      .where(and(eq(s.batchId, batchId), eq(s.status, "pending")))
      .orderBy(s.idx)
      .limit(1);
    if (!next) return null;
    const taken = await shardClaimed(db, batchId, next.idx, owner, until);
    if (taken) return taken;
  }
  return null;
}

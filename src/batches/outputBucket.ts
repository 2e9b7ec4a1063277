// GET /batches/{id}/output while a batch runs, when the files are in a
// bucket (docs/CONTRACT.md §12, §14): any node answers with the lines of every shard,
// wherever it runs. A shard that is done: its part object (uploaded before
// it was marked done). One this node runs: its local part file, cut after
// its last line. One another node runs (or that paused): its checkpoints in
// the bucket (worker/checkpoints.ts), at most about a second behind.
import { open, type FileHandle } from "node:fs/promises";
import { asc, eq } from "drizzle-orm";
import type { AppContext } from "../context";
import { bucketOf } from "../storage/bucket";
import type { S3Locator } from "../storage/locator";
import { chainOf, listSegments } from "./worker/checkpoints";
import { partPath } from "./paths";
import { resultFileIds } from "./finalize";
import type { BatchRow } from "./service";

const CHUNK = 256 * 1024;

type Source =
  | { kind: "file"; fh: FileHandle; end: number }
  /** An object (or a byte range of it); `fallback`: where the same bytes are if it is gone (a checkpoint removed when its shard ended: the part object begins with it). */
  | { kind: "object"; loc: S3Locator; range?: [number, number]; fallback?: { loc: S3Locator; range: [number, number] } };

/** The lines so far of every shard, in shard order, as one stream. */
export async function bucketParts(ctx: AppContext, b: BatchRow, kind: "output" | "error"): Promise<ReadableStream<Uint8Array>> {
  const s = ctx.db.t.batchShards;
  const shards = await ctx.db
    .select({ idx: s.idx, status: s.status, claims: s.claims, owner: s.leaseOwner, completed: s.completed, failed: s.failed })
    .from(s)
    .where(eq(s.batchId, b.id))
    .orderBy(asc(s.idx));
  const fileId = kind === "output" ? resultFileIds(b.id).out : resultFileIds(b.id).err;
  const sources: Source[] = [];
  try {
    for (const sh of shards) {
      if (sh.claims === 0) continue;
      const target = ctx.store.partTarget(fileId, sh.idx, sh.claims)!;
      if (sh.status === "done") {
        if ((kind === "output" ? sh.completed : sh.failed) > 0) sources.push({ kind: "object", loc: target.object });
        continue;
      }
      if (sh.status === "running" && sh.owner === ctx.members?.id) {
        const local = await openLocal(partPath(ctx, b.id, kind === "output" ? "out" : "err", sh.idx));
        if (local) sources.push(local);
        continue;
      }
      for (const seg of chainOf(await listSegments(target.checkpoints)))
        sources.push({
          kind: "object",
          loc: { s3: target.checkpoints.s3, key: seg.key },
          fallback: { loc: target.object, range: [seg.start, seg.end] },
        });
    }
  } catch (e) {
    await Promise.all(sources.map((x) => (x.kind === "file" ? x.fh.close().catch(() => {}) : undefined)));
    throw e;
  }
  return streamOf(sources);
}

async function openLocal(path: string): Promise<Source | null> {
  let fh: FileHandle;
  try {
    fh = await open(path, "r");
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") return null;
    throw e;
  }
  const end = await endOfLastLine(fh, (await fh.stat()).size);
  if (end > 0) return { kind: "file", fh, end };
  await fh.close();
  return null;
}

/** One stream of the sources in order (each read when its turn comes; local files are open already). */
export function streamOf(sources: Source[]): ReadableStream<Uint8Array> {
  let i = 0;
  let pos = 0;
  let reader: { read(): Promise<{ value?: Uint8Array; done: boolean }>; cancel(): Promise<void> } | null = null;
  const objectReader = async (src: Extract<Source, { kind: "object" }>) => {
    // (Every read goes through src/storage/bucket.ts: retried where it fails.)
    const bytes = (loc: S3Locator, range?: [number, number]) => bucketOf(loc.s3).bytes(loc.key, range ? { start: range[0], end: range[1] } : undefined);
    try {
      // Fetched whole before streaming: a checkpoint is about a second of lines.
      return await bytes(src.loc, src.range);
    } catch (e) {
      if (!src.fallback) throw e;
      return await bytes(src.fallback.loc, src.fallback.range);
    }
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          const src = sources[i];
          if (!src) return controller.close();
          if (src.kind === "object") {
            if (!reader) {
              const loc = src.loc;
              if (src.range || src.fallback) {
                i++;
                const bytes = await objectReader(src);
                if (bytes.length > 0) return controller.enqueue(bytes);
                continue;
              }
              reader = bucketOf(loc.s3).stream(loc.key).getReader();
            }
            const { value, done } = await reader!.read();
            if (done || !value) {
              reader = null;
              i++;
              continue;
            }
            return controller.enqueue(value);
          }
          if (pos >= src.end) {
            await src.fh.close().catch(() => {});
            i++;
            pos = 0;
            continue;
          }
          const buf = new Uint8Array(Math.min(CHUNK, src.end - pos));
          const { bytesRead } = await src.fh.read(buf, 0, buf.length, pos);
          if (bytesRead === 0) throw new Error("a part file is shorter than when the answer began");
          pos += bytesRead;
          return controller.enqueue(bytesRead === buf.length ? buf : buf.subarray(0, bytesRead));
        }
      },
      async cancel() {
        await reader?.cancel().catch(() => {});
        await Promise.all(sources.slice(i).map((x) => (x.kind === "file" ? x.fh.close().catch(() => {}) : undefined)));
      },
    },
    { highWaterMark: 0 },
  );
}

/** Bytes up to and including the last newline of the first `size` bytes (0 if none). */
export async function endOfLastLine(fh: FileHandle, size: number): Promise<number> {
  const WINDOW = 65536;
  const buf = new Uint8Array(WINDOW);
  for (let end = size; end > 0; end -= WINDOW) {
    const start = Math.max(0, end - WINDOW);
    const { bytesRead } = await fh.read(buf, 0, end - start, start);
    const nl = buf.subarray(0, bytesRead).lastIndexOf(10);
    if (nl !== -1) return start + nl + 1;
  }
  return 0;
}

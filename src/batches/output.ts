// GET /batches/{id}/output?kind=output|error (docs/CONTRACT.md §12): the result lines
// written so far, as JSON Lines, also while the batch runs; after it ends,
// the same bytes as its output or error file.
//
// While it runs, the lines are the shards' part files in shard order, each
// cut after its last complete line at the moment of the request: parts only
// grow by whole lines (a torn tail after a crash is cut off before a shard
// runs again), so what is sent is always a subset of the final file's lines.
// Every part is opened before the answer starts: finalize may rename parts
// into the file store meanwhile, and an open descriptor follows its file.
import { open, type FileHandle } from "node:fs/promises";
import { asc, eq } from "drizzle-orm";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { fileBodyWithLength } from "../files/content";
import { partPath } from "./paths";
import { bucketParts, endOfLastLine, streamOf } from "./outputBucket";
import { FINAL_STATES, getBatch, type BatchRow } from "./service";

const JSONL = { "content-type": "application/jsonl" };
/** A batch in `finalizing` is a few renames and one transaction from its files: wait that long for them. */
const FINALIZE_WAIT_MS = 10_000;

const isFinal = (b: BatchRow) => (FINAL_STATES as readonly string[]).includes(b.status);

export async function batchOutput(ctx: AppContext, project: string, id: string, kindParam: string | undefined): Promise<Response> {
  const kind = kindParam === undefined || kindParam === "" ? "output" : kindParam;
  if (kind !== "output" && kind !== "error") throw new ApiError("invalid_value", "kind must be 'output' or 'error'", { param: "kind" });
  let b = await getBatch(ctx, project, id);
  if (!isFinal(b) && b.status !== "finalizing") {
    // Files in a bucket: every shard's lines, from whichever node (outputBucket.ts).
    if (ctx.store.partTarget(b.id, 0, 0)) return new Response(await bucketParts(ctx, b, kind), { headers: JSONL });
    const live = await openParts(ctx, b, kind);
    if (live) return live;
    // A part vanished: finalize moved it. The file is moments away.
    b = await getBatch(ctx, project, id);
  }
  const until = Date.now() + FINALIZE_WAIT_MS;
  while (!isFinal(b) && Date.now() < until) {
    await Bun.sleep(50);
    b = await getBatch(ctx, project, id);
  }
  if (!isFinal(b)) throw new ApiError("invalid_state", `Batch ${b.id} is still finalizing; try again shortly`, { headers: { "retry-after": "1" } });
  return finalFile(ctx, kind === "output" ? b.outputFileId : b.errorFileId);
}

async function finalFile(ctx: AppContext, fileId: string | null): Promise<Response> {
  const { files } = ctx.db.t;
  const [row] = fileId ? await ctx.db.select().from(files).where(eq(files.id, fileId)) : [];
  if (!row) return new Response("", { headers: { ...JSONL, "content-length": "0" } });
  // With Content-Length, whichever storage holds it (docs/CONTRACT.md §17; src/files/content.ts).
  return new Response(await fileBodyWithLength(ctx, row), { headers: { ...JSONL, "content-length": String(row.bytes) } });
}

/** The running batch's lines so far; null if a part went missing (the batch is finalizing). */
async function openParts(ctx: AppContext, b: BatchRow, kind: "output" | "error"): Promise<Response | null> {
  const { batchShards } = ctx.db.t;
  const shards = await ctx.db.select({ idx: batchShards.idx, status: batchShards.status }).from(batchShards).where(eq(batchShards.batchId, b.id)).orderBy(asc(batchShards.idx));
  const parts: { fh: FileHandle; end: number }[] = [];
  const closeAll = () => Promise.all(parts.map((p) => p.fh.close().catch(() => {})));
  try {
    for (const s of shards) {
      let fh: FileHandle;
      try {
        fh = await open(partPath(ctx, b.id, kind === "output" ? "out" : "err", s.idx), "r");
      } catch (e) {
        if ((e as { code?: string }).code !== "ENOENT") throw e;
        // Not started yet, or moved by finalize (only once every shard is done).
        if (s.status === "done") {
          await closeAll();
          return null;
        }
        continue;
      }
      const end = await endOfLastLine(fh, (await fh.stat()).size);
      if (end === 0) await fh.close();
      else parts.push({ fh, end });
    }
  } catch (e) {
    await closeAll();
    throw e;
  }
  const body = streamOf(parts.map((p) => ({ kind: "file" as const, ...p })));
  return new Response(body, { headers: JSONL });
}

// GET /v1/messages/batches/{id}/results (docs/CONTRACT.md §22): JSON Lines
// `{custom_id, result}`, made from the ended batch's own result files as
// they are read — each line of the output file as `succeeded` with its
// message (the batch engine wrote the answer as one: messageLine below only
// changes the envelope), each line of the error file as `errored` (the
// error in Anthropic's shape) or, for a line its batch's cancel or expiry
// stopped, `canceled` / `expired`. Pulled a
// chunk at a time as the client reads: never whole in memory, whatever
// the batch's size; the files are read into one reused buffer where they
// lie on the disk, and the lines go out as strings, so that reading a
// batch's results leaves no buffer per chunk to the collector. A batch the
// engine refused before running (`failed`: a model gone since it was made)
// answers each request of its input errored.
import { eq } from "drizzle-orm";
import type { AppContext } from "../../context";
import type { BatchRow } from "../../db/schema";
import { anthropicErrorType, ApiError, statusOfErrorBody } from "../../errors";
import { fileLocator, fileStream } from "../../files/content";
import { storedChunks } from "../../files/storedChunks";
import { textBlocks } from "../../jsonl/lineReader";
import { newId } from "../../ids";
import { toMessage } from "../message";
import { getMessageBatch } from "./service";
import { stopOf } from "./stopped";
import { isEnded } from "./view";

type Json = Record<string, unknown>;
type Translate = (text: string) => string | null;

export async function messageBatchResults(ctx: AppContext, project: string, id: string): Promise<Response> {
  const b = await getMessageBatch(ctx, project, id);
  if (!isEnded(b)) throw new ApiError("invalid_value", `Message batch ${id} has not ended yet (results are available once processing_status is 'ended')`);
  const sources: [string | null, Translate][] =
    b.status === "failed"
      ? [[b.inputFileId, refusedLine(b)]]
      : [
          [b.outputFileId, succeededLine],
          [b.errorFileId, erroredLine],
        ];
  return new Response(resultStream(ctx, sources), { headers: { "content-type": "application/binary" } });
}

function resultStream(ctx: AppContext, sources: [string | null, Translate][]): ReadableStream<string> {
  let blocks: AsyncGenerator<string> | null = null;
  let translate: Translate | null = null;
  let next = 0;
  // Strings go out as they are (Bun writes them to the socket): no buffer of our own for each chunk.
  return new ReadableStream<string>({
    async pull(controller) {
      try {
        await pullLines(controller);
      } catch (e) {
        // The file being read is closed now, not left to the collector.
        await blocks?.return(undefined);
        blocks = null;
        throw e;
      }
    },
    async cancel() {
      await blocks?.return(undefined);
    },
  });

  async function pullLines(controller: ReadableStreamDefaultController<string>): Promise<void> {
    for (;;) {
      if (!blocks) {
        if (next >= sources.length) return controller.close();
        const [fileId, t] = sources[next++]!;
        const row = fileId ? (await ctx.db.select().from(ctx.db.t.files).where(eq(ctx.db.t.files.id, fileId)))[0] : undefined;
        if (!row) continue;
        blocks = textBlocks(storedChunks(await fileLocator(ctx, row.id), () => fileStream(ctx, row)));
        translate = t;
      }
      const { value, done } = await blocks.next();
      if (done) {
        blocks = null;
        continue;
      }
      let out = "";
      for (let start = 0; start < value.length; ) {
        let nl = value.indexOf("\n", start);
        if (nl === -1) nl = value.length;
        const stop = nl > start && value.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
        if (stop > start) {
          const line = translate!(value.substring(start, stop));
          if (line !== null) out += line;
        }
        start = nl + 1;
      }
      if (out) return controller.enqueue(out);
    }
  }
}

const resultLine = (customId: unknown, result: Json) => JSON.stringify({ custom_id: customId, result }) + "\n";
const errored = (status: number, message: string): Json => ({ type: "errored", error: { type: "error", error: { type: anthropicErrorType(status), message } } });

function succeededLine(text: string): string {
  // The batch engine wrote the answer as a message already: only the envelope changes.
  const spliced = messageLine(text);
  if (spliced !== null) return spliced;
  // A batch run before answers were written as messages: its chat completions translated here.
  return succeededLineParsed(text, newId("msg_"));
}

const HEAD = '{"id":"batch_req_';
const CUSTOM_ID = '","custom_id":"';
const BODY = '"body":{"id":"msg_';
const TAIL = '},"error":null}';

/**
 * An output line whose answer is a message (src/batches/types.ts
 * AnswerShape), as the batch engine writes it —
 * `{"id":"batch_req_…","custom_id":"…","response":{…,"body":<message>},"error":null}` —
 * as its result line, by cutting the text; null for any other line. A
 * message batch's custom_id has no character JSON escapes (create.ts), and
 * `"body":` cannot occur inside a JSON string, so the first one after the
 * custom_id is the answer's.
 */
export function messageLine(text: string): string | null {
  if (!text.startsWith(HEAD) || !text.endsWith(TAIL)) return null;
  const idAt = text.indexOf(CUSTOM_ID, HEAD.length);
  if (idAt === -1) return null;
  const from = idAt + CUSTOM_ID.length;
  const to = text.indexOf('"', from);
  const bodyAt = text.indexOf(BODY, to);
  if (to === -1 || bodyAt === -1 || !text.startsWith('","type":"message"', text.indexOf('"', bodyAt + BODY.length))) return null;
  const customId = text.slice(from, to);
  if (customId.includes("\\")) return null;
  return `{"custom_id":"${customId}","result":{"type":"succeeded","message":${text.slice(bodyAt + 7, text.length - TAIL.length)}}}\n`;
}

/** A `succeeded` line the full way: the output line parsed, its answer translated by toMessage (any shape the engine writes). */
export function succeededLineParsed(text: string, messageId: string): string {
  const l = JSON.parse(text) as { custom_id: string; response: { body: Json } };
  return resultLine(l.custom_id, { type: "succeeded", message: toMessage(l.response.body, { id: messageId }) });
}

function erroredLine(text: string): string {
  const stop = stopOf(text);
  const l = JSON.parse(text) as { custom_id: string; response: { status_code: number; body: unknown } | null; error: { code: string; message: string } | null };
  if (stop) return resultLine(l.custom_id, { type: stop });
  if (l.response) {
    const body = l.response.body as { error?: { message?: unknown } } | null;
    const message = typeof body?.error?.message === "string" ? body.error.message : JSON.stringify(l.response.body).slice(0, 2000);
    return resultLine(l.custom_id, errored(l.response.status_code, message));
  }
  return resultLine(l.custom_id, errored(statusOfErrorBody({ code: l.error?.code }), l.error?.message ?? "the request failed"));
}

function refusedLine(b: BatchRow): Translate {
  const why = b.errors?.[0]?.message ?? "the batch could not be run";
  return (text) => resultLine((JSON.parse(text) as { custom_id: string }).custom_id, errored(400, why));
}

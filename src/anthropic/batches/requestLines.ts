// The requests of a message batch as the lines of its batch input file
// (docs/CONTRACT.md §22): each element of the body's `requests` checked and
// translated to a chat completion (../request.ts), written as
// `{custom_id, method, url, body}`. The first bad request refuses the whole
// batch, naming it (`requests.N.params.…`, its custom_id). Runs in a Worker
// of its own (./lines.worker.ts, driven by ./linesClient.ts), so that the
// HTTP thread only moves bytes while a create reads its body.
import { chatCompletions as chatKind } from "../../endpoints/chatCompletions";
import { ApiError } from "../../errors";
import type { ChunkReader } from "../../files/multipart";
import { toChatRequest } from "../request";
import { readRequests } from "./requestsReader";

/** docs/CONTRACT.md §22: Anthropic's limits on one message batch. */
export const MAX_REQUESTS = 100_000;
export const MAX_BODY_BYTES = 256 * 1024 * 1024;
const CUSTOM_ID = /^[a-zA-Z0-9_-]{1,64}$/;
/** Lines are handed over in pieces of about this many characters. */
const FLUSH_CHARS = 1 << 20;

const bad = (param: string, message: string) => new ApiError("invalid_value", `${param}: ${message}`, { param });
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Reads the body from `body` and hands its lines to `emit`, a piece at a
 * time, in order (waiting for it when it returns a promise); resolves with the number of requests, or throws the
 * ApiError that refuses the batch. `models`: those a request may name.
 */
export async function requestLines(body: ChunkReader, models: Set<string>, emit: (lines: string) => void | Promise<void>): Promise<number> {
  const seen = new Set<string>();
  let pending = "";
  for await (const elements of readRequests(body)) {
    for (const { index, text } of elements) {
      if (index >= MAX_REQUESTS) throw bad("requests", `at most ${MAX_REQUESTS} requests may be sent in one batch`);
      pending += lineOf(index, text, seen, models);
    }
    if (pending.length >= FLUSH_CHARS) {
      await emit(pending);
      pending = "";
    }
  }
  if (seen.size === 0) throw bad("requests", "must hold at least one request");
  if (pending) await emit(pending);
  return seen.size;
}

/** One request, checked, as its line of the batch input file. */
function lineOf(index: number, text: string, seen: Set<string>, models: Set<string>): string {
  let req: unknown;
  try {
    req = JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", `${at(index)}: not valid JSON`, { param: at(index) });
  }
  if (!isObject(req)) throw bad(at(index), "must be an object");
  for (const k in req) if (k !== "custom_id" && k !== "params") throw bad(`${at(index)}.${k}`, "Extra inputs are not permitted");
  const customId = req.custom_id;
  if (customId === undefined) throw new ApiError("missing_field", `${at(index)}.custom_id: Field required`, { param: `${at(index)}.custom_id` });
  if (typeof customId !== "string" || !CUSTOM_ID.test(customId))
    throw bad(`${at(index)}.custom_id`, `must match ^[a-zA-Z0-9_-]{1,64}$ (got ${JSON.stringify(String(customId).slice(0, 80))})`);
  if (seen.has(customId)) throw new ApiError("duplicate_custom_id", `${at(index)}.custom_id: duplicate custom_id '${customId}'; each must be unique within the batch`, { param: `${at(index)}.custom_id` });
  seen.add(customId);
  const params = req.params;
  if (params === undefined) throw new ApiError("missing_field", `${at(index)}.params: Field required (custom_id '${customId}')`, { param: `${at(index)}.params` });
  if (!isObject(params)) throw bad(`${at(index)}.params`, `must be an object (custom_id '${customId}')`);
  let chat: Record<string, unknown>;
  try {
    chat = toChatRequest(params);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    // The translation names the field within params: prefixed with where the request is.
    throw new ApiError(e.code, `${at(index)}.params.${e.message} (custom_id '${customId}')`, { param: `${at(index)}.params${e.param ? `.${e.param}` : ""}` });
  }
  // (Only `stream: true` puts stream fields in the translation, and it is refused here: nothing to take out.)
  if (params.stream === true) throw bad(`${at(index)}.params.stream`, `streaming is not supported in a message batch (custom_id '${customId}')`);
  if (!models.has(chat.model as string))
    throw bad(`${at(index)}.params.model`, `model '${String(chat.model).slice(0, 200)}' is not available for message batches (custom_id '${customId}')`);
  // The custom_id's characters need no escape (CUSTOM_ID).
  return `{"custom_id":"${customId}","method":"POST","url":"${chatKind.endpoint}","body":${JSON.stringify(chat)}}\n`;
}

/** Where a request is, in the names of errors (made only for one). */
const at = (index: number) => `requests.${index}`;

// A streamed chat completion answer (the Response the chat route's service
// gave) read as it arrives and answered as Anthropic's event stream
// (docs/CONTRACT.md §22): each chunk is translated when it comes
// (./events.ts), nothing is held whole. A client that leaves cancels the
// chat stream, which frees the model's slot and the upstream request as on
// /chat/completions.
import { anthropicErrorType, statusOfErrorBody } from "../errors";
import { SseDataReader, sseResponse } from "../http/sse";
import { ChatStreamTranslator, messageEvents, type MessageEvent, type StreamStart } from "./events";
import { toMessage } from "./message";

/** An in-band error (after the 200) in Anthropic's words, from the OpenAI error body the chat stream ended with. */
export function errorEvent(error: { message?: unknown; type?: unknown; code?: unknown } | null | undefined): MessageEvent {
  const message = typeof error?.message === "string" ? error.message : "The stream ended because of an error";
  return { type: "error", error: { type: anthropicErrorType(statusOfErrorBody(error)), message } };
}

/** At most this much of an unfinished event is held (a chunk is small; something bigger is no chunk). */
const MAX_EVENT_CHARS = 16 * 1024 * 1024;

async function* translated(body: ReadableStream<Uint8Array>, t: ChatStreamTranslator): AsyncGenerator<MessageEvent> {
  const reader = body.getReader();
  let finished = false;
  try {
    yield* t.start();
    const sse = new SseDataReader(MAX_EVENT_CHARS);
    for (let done = false; !done && !finished; ) {
      const read = await reader.read();
      done = read.done;
      for (const data of done ? sse.finish() : sse.push(read.value!)) {
        if (data === "[DONE]") {
          finished = true;
          break;
        }
        let chunk: { error?: { message?: unknown; type?: unknown; code?: unknown } } | null;
        try {
          chunk = JSON.parse(data);
        } catch {
          continue; // not a chunk: nothing in it to say
        }
        if (chunk?.error) {
          finished = true;
          yield errorEvent(chunk.error);
          return;
        }
        yield* t.push(chunk);
      }
    }
    finished = true;
    yield* t.end();
  } finally {
    // Ended early (the client left, or an error): the chat stream is cancelled, which releases its slot.
    if (!finished) await reader.cancel().catch(() => {});
    else reader.releaseLock();
  }
}

/**
 * Anthropic's stream for a chat route's 2xx answer to a streamed request.
 * An engine that answered it with one JSON body instead (some ignore
 * `stream`) gets its message's events all at once.
 */
export async function messageStream(res: Response, head: StreamStart, headers: Record<string, string>, keepAliveMs: number): Promise<Response> {
  const opts = { headers, keepAliveMs, named: true };
  if (!res.body) return sseResponse(fromList(messageEvents(toMessage({}, head))), opts);
  if (!(res.headers.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream")) {
    const completion = await res.json().catch(() => ({}));
    return sseResponse(fromList(messageEvents(toMessage(completion, head))), opts);
  }
  return sseResponse(translated(res.body, new ChatStreamTranslator(head)), opts);
}

async function* fromList(events: MessageEvent[]): AsyncGenerator<MessageEvent> {
  yield* events;
}

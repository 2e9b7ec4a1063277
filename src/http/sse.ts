// Server-sent events from an async generator of JSON payloads. The stream
// is pull-based (the generator runs only as fast as the client reads), a
// ": keep-alive" comment goes out before nothing else has for `keepAliveMs`
// (with `keepAliveFirst`, also at once, so the headers go out: Bun sends
// them with the first byte of the body),
// and a client disconnect cancels the stream, which returns the generator
// (its `finally` blocks run) so the producer stops. So does revoking the
// stream's key (`hold`), after an in-band error that says so.
import type { StreamHold } from "../auth/revocations";
import { ApiError } from "../errors";

const encoder = new TextEncoder();

/** Thrown by a stream's producer to end it with this payload (an OpenAI error body) as its last event. */
export class InBandError extends Error {
  constructor(readonly payload: unknown) {
    super("in-band error");
  }
}

export function sseResponse(
  events: AsyncGenerator<unknown, void, unknown>,
  opts: {
    headers?: Record<string, string>;
    keepAliveMs?: number;
    keepAliveFirst?: boolean;
    onClose?: () => void;
    /** Registers the stream under its key: revoking the key ends it (auth/revocations.ts). */
    hold?: StreamHold;
    /**
     * Named events, as the Responses API streams them: each payload's `type`
     * goes out as its `event:` line, an error as `event: error`, and the stream
     * ends without `data: [DONE]`.
     */
    named?: boolean;
  } = {},
): Response {
  let timer: ReturnType<typeof setInterval> | null = null;
  let closed = false;
  let lastSent = Date.now();
  let release: (() => void) | null = null;
  const close = () => {
    if (closed) return;
    closed = true;
    if (timer) clearInterval(timer);
    release?.();
    opts.onClose?.();
  };
  const send = (controller: ReadableStreamDefaultController<Uint8Array>, text: string) => {
    lastSent = Date.now();
    controller.enqueue(encoder.encode(text));
  };
  /** The last event of a stream that ends on an error: `body` is an OpenAI error body. */
  const sendError = (controller: ReadableStreamDefaultController<Uint8Array>, body: unknown) => {
    // Named: OpenAI's `error` event ({type, code, message, param}), with the
    // error object too, which the SDKs raise as an APIError.
    const error = (body as { error?: Record<string, unknown> }).error;
    send(controller, opts.named ? `event: error\ndata: ${JSON.stringify({ type: "error", ...error, error })}\n\n` : `data: ${JSON.stringify(body)}\n\n`);
  };
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // The key revoked: the client is told, the stream ends, and the producer
      // stops (onClose aborts it, so a pending next() settles and return() runs).
      release =
        opts.hold?.(() => {
          if (closed) return;
          try {
            sendError(controller, new ApiError("invalid_api_key", "The API key was revoked").body());
            controller.close();
          } catch {
            // The client is gone already.
          }
          close();
          events.return(undefined).catch(() => {});
        }) ?? null;
      const every = opts.keepAliveMs;
      if (every) {
        if (opts.keepAliveFirst) send(controller, ": keep-alive\n\n");
        // Checked every `tick` and sent once quiet for every − tick: never a gap longer than `every`.
        const tick = Math.min(every / 2, 1000);
        timer = setInterval(() => {
          if (!closed && Date.now() - lastSent >= every - tick) send(controller, ": keep-alive\n\n");
        }, tick);
      }
    },
    async pull(controller) {
      try {
        const { value, done } = await events.next();
        if (closed) return;
        if (done) {
          if (!opts.named) send(controller, "data: [DONE]\n\n");
          controller.close();
          close();
          return;
        }
        send(controller, opts.named ? `event: ${(value as { type: string }).type}\ndata: ${JSON.stringify(value)}\n\n` : `data: ${JSON.stringify(value)}\n\n`);
      } catch (e) {
        if (closed) return;
        // After the first byte the status is sent: report in-band, then end.
        // Only our own errors are worded for clients; anything else (a database
        // or parser message) would leak internals (docs/CONTRACT.md §3), so it is generic.
        const body =
          e instanceof InBandError
            ? e.payload
            : e instanceof ApiError
            ? e.body()
            : { error: { message: "The stream ended because of an internal error", type: "server_error", param: null, code: "stream_error" } };
        sendError(controller, body);
        controller.close();
        close();
      }
    },
    async cancel() {
      close();
      await events.return();
    },
  });
  return new Response(stream, {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive", ...opts.headers },
  });
}

/**
 * The `data` payloads of a server-sent event stream read as its bytes
 * arrive, however they are cut: an event ends at a blank line (LF or CRLF),
 * its data lines are joined with "\n" (the SSE rule), comments and other
 * fields are skipped. For reading upstream streams (chat sessions, tpm).
 */
export class SseDataReader {
  private readonly decoder = new TextDecoder();
  private pending = "";
  /** Where to look for the next event end in `pending` (what was scanned before had none). */
  private scanFrom = 0;

  /** `maxEventChars`: an unfinished event longer than this is dropped (it is no chat chunk) instead of buffered on. */
  constructor(private readonly maxEventChars = Infinity) {}

  /** The payloads of the events `chunk` completes. */
  push(chunk: Uint8Array): string[] {
    this.pending += this.decoder.decode(chunk, { stream: true });
    const out: string[] = [];
    for (;;) {
      EVENT_END.lastIndex = Math.max(0, this.scanFrom - 3);
      const m = EVENT_END.exec(this.pending);
      if (!m) break;
      const data = dataOf(this.pending.slice(0, m.index));
      if (data !== null) out.push(data);
      this.pending = this.pending.slice(m.index + m[0].length);
      this.scanFrom = 0;
    }
    if (this.pending.length > this.maxEventChars) this.pending = "";
    this.scanFrom = this.pending.length;
    return out;
  }

  /** The stream ended: a last event without its blank line still counts. */
  finish(): string[] {
    this.pending += this.decoder.decode();
    const data = this.pending.trim() ? dataOf(this.pending) : null;
    this.pending = "";
    return data === null ? [] : [data];
  }
}

function dataOf(event: string): string | null {
  let data: string | null = null;
  for (const line of event.split(LINE_END))
    if (line.startsWith("data:")) data = (data === null ? "" : data + "\n") + line.slice(line.startsWith("data: ") ? 6 : 5);
  return data;
}

const EVENT_END = /\r?\n\r?\n/g;
const LINE_END = /\r?\n/;


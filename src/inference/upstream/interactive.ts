// Reading what an OpenAI-compatible upstream answered an interactive
// request. The call itself is ./pass.ts, on the main thread and on front
// threads alike; nothing here counts metrics or health, so front threads
// load it too. Streams are passed through as they
// arrive (pull-based: nothing is buffered whole); a client disconnect aborts
// the upstream request; errors become OpenAI error bodies: upstream 4xx pass through with
// their body, 5xx → 502, timeouts → 504, unreachable → 502.
import { attached } from "../../attached";
import type { StreamHold } from "../../auth/revocations";
import { ApiError } from "../../errors";
import type { Deadline } from "./deadline";
import type { UpstreamAnswer } from "./answer";
import type { ModelEntry } from "../registry";
import { SseDataReader } from "../../http/sse";
import type { EndpointKind, StreamTally, TokenCounts } from "../../endpoints/kind";
import { readChatStreamEvent } from "../../endpoints/chatCompletions";

/** The deadline of each upstream answer: reading its body clears it, and can tell a timeout from other failures. */
const deadlines = attached<{ model: UpstreamNamed; deadline: Deadline }>("deadline");

/** What the helpers here say of a model in their errors: its upstream's name and timeout. */
export type UpstreamNamed = Pick<ModelEntry, "upstreamName" | "timeoutMs">;

/** Ties an upstream answer to the call's deadline (for upstreamText, streamDeadline, streamFailure). */
export const attachDeadline = (res: UpstreamAnswer, model: UpstreamNamed, deadline: Deadline): void => deadlines.set(res, { model, deadline });

export const timeoutError = (model: UpstreamNamed) => new ApiError("upstream_timeout", `Upstream ${model.upstreamName} did not answer within ${model.timeoutMs} ms`);

/**
 * Reads a whole (non-streamed) upstream body. The timeout covers the body
 * too: an upstream that sends headers and then stalls is a 504, and a
 * dropped connection a 502 (never an unhandled abort: a 500).
 */
export async function upstreamText(res: UpstreamAnswer): Promise<string> {
  const t = deadlines.get(res);
  try {
    return await res.text();
  } catch (e) {
    if (t?.deadline.timedOut) throw timeoutError(t.model);
    throw new ApiError("upstream_error", `Upstream ${t?.model.upstreamName ?? "(unknown)"} broke off its answer`);
  } finally {
    t?.deadline.clear();
  }
}

/**
 * For a streamed answer: the deadline becomes an idle timeout (restarted on
 * every chunk), cleared when the stream ends. Returns the per-chunk and the
 * end callbacks.
 */
export function streamDeadline(res: UpstreamAnswer): { onChunk: () => void; onEnd: () => void } {
  const t = deadlines.get(res);
  return { onChunk: () => t?.deadline.restart(), onEnd: () => t?.deadline.clear() };
}

/**
 * A 2xx answer we relay as application/json must be JSON. When nothing else
 * needs it parsed, a look at its first character catches what does happen
 * (an HTML page from a proxy in front of the engine) without parsing a
 * large answer (embeddings) a second time.
 */
export function checkLooksLikeJson(model: UpstreamNamed, text: string, headers?: Record<string, string>): void {
  if (!/^\s*\{/.test(text)) throw notJson(model, headers);
}

export const notJson = (model: UpstreamNamed, headers?: Record<string, string>) =>
  new ApiError("upstream_error", `Upstream ${model.upstreamName} answered with invalid JSON`, { headers });

/**
 * A whole 2xx answer's output tokens, for a tpm limit (`metered`): its
 * usage, read the way the endpoint kind reads it. Parsing the answer is
 * only needed then; otherwise it is only looked at (checkLooksLikeJson)
 * and counts 0. Not JSON: notJson.
 */
export function answerTokens(model: UpstreamNamed, kind: Pick<EndpointKind, "readUsage">, text: string, metered: boolean): number {
  if (!metered) {
    checkLooksLikeJson(model, text);
    return 0;
  }
  let parsed: { usage?: unknown };
  try {
    parsed = JSON.parse(text);
  } catch {
    throw notJson(model);
  }
  kind.readUsage(parsed?.usage, counts);
  return counts.output;
}

/** Reused: read and used at once, never across an await. */
const counts: TokenCounts = { input: 0, output: 0, cached: 0, reasoning: 0 };

/**
 * Turns a non-2xx upstream answer into our error: 4xx verbatim, 5xx as 502.
 * `headers` (x-ratelimit-*) go on either: every inference response carries
 * them, passed-through errors included. (The call counted it: ./call.ts.)
 */
export async function upstreamFailure(model: UpstreamNamed, res: UpstreamAnswer, headers: Record<string, string> = {}): Promise<Response | ApiError> {
  const text = await upstreamText(res);
  if (res.status >= 400 && res.status < 500) {
    let body = text;
    try {
      const parsed = JSON.parse(text);
      if (!parsed?.error) throw new Error("not an OpenAI error");
    } catch {
      body = JSON.stringify({ error: { message: text.slice(0, 2000) || `Upstream answered ${res.status}`, type: "invalid_request_error", param: null, code: null } });
    }
    const out: Record<string, string> = { "content-type": "application/json" };
    const ra = res.headers.get("retry-after");
    if (ra) out["retry-after"] = ra;
    return new Response(body, { status: res.status, headers: { ...out, ...headers } });
  }
  let detail = "";
  try {
    detail = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? "";
  } catch {}
  return new ApiError("upstream_error", `Upstream ${model.upstreamName} failed with HTTP ${res.status}${detail ? `: ${detail.slice(0, 500)}` : ""}`, { headers: { ...headers } });
}

/**
 * Why a streamed upstream answer broke off after it began: its idle
 * timeout (504's error) or anything else (the connection dropped: 502's).
 */
export function streamFailure(res: UpstreamAnswer): ApiError {
  const t = deadlines.get(res);
  if (t?.deadline.timedOut) return timeoutError(t.model);
  return new ApiError("upstream_error", `Upstream ${t?.model.upstreamName ?? "(unknown)"} broke off its answer`);
}

const encoder = new TextEncoder();

/**
 * An upstream's SSE answer, passed on event by event as it arrives: each
 * upstream chunk goes out up to its last complete event, and only an event
 * split across chunks waits for its end (at most MAX_HELD_EVENT bytes; past
 * that, bytes go out as they are). So if the upstream breaks off, the client
 * never gets half an event, and its last event says why. `onEnd` is called
 * once, when the stream ends or the client cancels; `onChunk` sees every
 * upstream chunk. With `hold`, revoking the client's key ends the stream
 * (an in-band invalid_api_key error, then the end) and the upstream request.
 */
export function passThrough(res: UpstreamAnswer, onEnd: () => void, onChunk?: (chunk: Uint8Array) => void, hold?: StreamHold): ReadableStream<Uint8Array> {
  const deadline = streamDeadline(res);
  const reader = res.body!.getReader();
  let ended = false;
  /** The start of an event whose end has not arrived yet. */
  let held: Uint8Array | null = null;
  let release: (() => void) | null = null;
  const end = () => {
    if (ended) return;
    ended = true;
    release?.();
    deadline.onEnd();
    onEnd();
  };
  return new ReadableStream<Uint8Array>({
    start(controller) {
      release =
        hold?.(() => {
          if (ended) return;
          end();
          // A half-received event is dropped, as when the upstream breaks off.
          try {
            controller.enqueue(encoder.encode(`data: ${JSON.stringify(new ApiError("invalid_api_key", "The API key was revoked").body())}\n\n`));
            controller.close();
          } catch {
            // The client is gone already.
          }
          reader.cancel().catch(() => {});
        }) ?? null;
    },
    async pull(controller) {
      try {
        // Reads until there is something to pass on: a pull that enqueues nothing is not called again.
        for (;;) {
          const { value, done } = await reader.read();
          // Ended meanwhile (the key was revoked): the stream is closed already.
          if (ended) return;
          if (done) {
            end();
            if (held) controller.enqueue(held);
            controller.close();
            return;
          }
          deadline.onChunk();
          onChunk?.(value);
          const bytes = held ? concat(held, value) : value;
          const cut = bytes.length > MAX_HELD_EVENT ? bytes.length : afterLastEvent(bytes);
          held = cut < bytes.length ? bytes.slice(cut) : null;
          if (cut > 0) return controller.enqueue(cut === bytes.length ? bytes : bytes.subarray(0, cut));
        }
      } catch {
        if (ended) return;
        end();
        // The status went out with the first byte: say what happened as the
        // stream's last event (SDKs raise it as an error) instead of cutting
        // the connection, which clients report as a network failure. A
        // half-received event is dropped: nobody could parse it.
        try {
          controller.enqueue(encoder.encode(`data: ${JSON.stringify(streamFailure(res).body())}\n\n`));
          controller.close();
        } catch {
          // The client is gone already.
        }
      }
    },
    async cancel(reason) {
      end();
      await reader.cancel(reason);
    },
  });
}

/** An SSE event longer than this is passed on in pieces rather than held whole. */
const MAX_HELD_EVENT = 1 << 20;

/** The index just past the last blank line (`\n\n` or `\r\n\r\n`, an event's end) in `b`, or 0. */
function afterLastEvent(b: Uint8Array): number {
  for (let i = b.length - 1; i > 0; i--) {
    if (b[i] !== 10) continue;
    if (b[i - 1] === 10 || (b[i - 1] === 13 && i >= 3 && b[i - 2] === 10)) return i + 1;
  }
  return 0;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/**
 * The completion tokens of a streamed upstream answer, for tpm limits (only
 * made for keys with one). The stream is read event by event as it passes
 * (nothing is held back from the client): if the upstream reports usage (the
 * client asked for `stream_options.include_usage`; a Responses stream always
 * does, in its last event) that count wins; otherwise the tokens of the text
 * deltas are counted the way the built-in models count them — an estimate,
 * so that a stream costs something against tpm even when usage was not
 * asked for. How an event is read is the endpoint module's business
 * (`readStreamEvent`; chat chunks by default).
 */
export class StreamUsage implements StreamTally {
  /** One event larger than this is not a chat chunk: it is not buffered. */
  private readonly events = new SseDataReader(1 << 20);
  reported: number | null = null;
  estimated = 0;

  constructor(private readonly read: (event: unknown, tally: StreamTally) => void = readChatStreamEvent) {}

  get completionTokens(): number {
    return this.reported ?? this.estimated;
  }

  push(chunk: Uint8Array): void {
    for (const data of this.events.push(chunk)) this.event(data);
  }

  /** The stream ended: a last event without its blank line still counts. */
  finish(): void {
    for (const data of this.events.finish()) this.event(data);
  }

  private event(data: string): void {
    if (!data || data === "[DONE]") return;
    let event: unknown;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    this.read(event, this);
  }
}

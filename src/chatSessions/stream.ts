// POST /chats/{id}/stream: stores the user message, streams the assistant
// reply as SSE chunks, and stores the reply when the stream ends — or what
// was produced so far when the client disconnects (generation stops then).
import { streamHold } from "../auth/revocations";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError, notFound } from "../errors";
import { newId, nowSeconds } from "../ids";
import { admitInSteps, resolveModel } from "../inference/admission/admit";
import { chatCompletions } from "../endpoints/chatCompletions";
import { planEcho } from "../inference/builtin/echo";
import { echoChunks } from "../inference/builtin/echoStream";
import { InBandError, SseDataReader, sseResponse } from "../http/sse";
import { countTokens, promptTokensOf } from "../inference/builtin/tokens";
import { callUpstream } from "../inference/upstream/call";
import { streamDeadline, streamFailure, upstreamFailure } from "../inference/upstream/interactive";
import { addMessage, chatExists, getChat, history } from "./service";

interface Delta {
  choices?: { delta?: { content?: string | null } }[];
}

/** A reply's chunks, and how to let go of their source (idempotent; also for a generator that never started). */
interface ReplySource {
  chunks: AsyncGenerator<Record<string, unknown>>;
  close(): void;
}

const STILL_OPENING = Symbol("still opening");

export async function streamReply(
  ctx: AppContext,
  principal: Principal,
  chatId: string,
  input: { content: string; max_tokens?: unknown; temperature?: number },
  request: Request,
): Promise<Response> {
  const chat = await getChat(ctx, principal.project, chatId);
  if (input.content.length === 0) throw new ApiError("invalid_value", "content must not be empty", { param: "content" });
  if (input.max_tokens !== undefined && input.max_tokens !== null && (!Number.isSafeInteger(input.max_tokens) || (input.max_tokens as number) < 1))
    throw new ApiError("invalid_value", "max_tokens must be a positive integer", { param: "max_tokens" });
  const model = resolveModel(ctx, chat.model, chatCompletions);
  const messages = [...(await history(ctx, chat)), { role: "user", content: input.content }];
  const body: Record<string, unknown> = { model: chat.model, messages, stream: true };
  if (input.max_tokens !== undefined && input.max_tokens !== null) body.max_tokens = input.max_tokens;
  if (input.temperature !== undefined) body.temperature = input.temperature;
  const plan = model.kind === "echo" ? planEcho(body) : null;
  const abort = new AbortController();
  const gone = AbortSignal.any([abort.signal, request.signal]);
  // Rate limits now (429 at once); the model's slot may take a while (queued).
  const { headers, slot, metersTokens } = await admitInSteps(ctx, principal, model, plan?.promptTokens ?? promptTokensOf(messages), () => gone);
  let held: (() => void) | null = null;
  /** Gives the model's slot back, once; a slot granted after the stream was given up goes straight back. */
  const release = () => {
    const r = held;
    held = null;
    r?.();
  };
  const opening: Promise<ReplySource | Response> = slot.then((r) => {
    held = r;
    if (gone.aborted) {
      release();
      throw new DOMException("the client left", "AbortError");
    }
    return plan !== null
      ? generatorSource(echoChunks(body, newId("chatcmpl-"), nowSeconds(), { latencyMs: model.latencyMs, tokensPerSecond: model.tokensPerSecond }, abort.signal, plan))
      : upstreamReply(model, body, gone);
  });
  // Handled where it is awaited; this only keeps a failure after an early start from counting as unhandled.
  opening.catch(() => {});

  // Wait for a slot and the upstream's answer (so a 429/529 or an upstream
  // 4xx can answer with its status), but not longer than the keep-alive
  // interval: a request waiting in a busy model's queue, or an engine that
  // sends no headers until it starts generating, must not leave the client
  // without a byte for longer than that. Past it, the stream starts with a
  // keep-alive comment, and a failure to open becomes its last event.
  let opened: ReplySource | Response | typeof STILL_OPENING;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    opened = await Promise.race([opening, new Promise<typeof STILL_OPENING>((r) => (timer = setTimeout(() => r(STILL_OPENING), ctx.config.sseKeepAliveMs)))]);
  } catch (e) {
    release();
    // A 529 already carries the refunded figures; an upstream error gets them here.
    if (e instanceof ApiError) for (const [k, v] of Object.entries(headers)) e.headers[k] ??= v;
    throw e;
  } finally {
    clearTimeout(timer);
  }
  if (opened instanceof Response) {
    // An upstream 4xx before the first byte passes through with its status
    // and body, as on /chat/completions: the client's request is what was
    // wrong, not the upstream (no 502); nothing is stored.
    release();
    for (const [k, v] of Object.entries(headers)) opened.headers.set(k, v);
    return opened;
  }

  let source: ReplySource | null = null;
  let reply = "";
  let userStored = false;
  let ended = false;
  /** The user message goes in once the reply has a source: nothing is stored for a request the upstream refused. */
  const storeUser = async (s: ReplySource) => {
    source = s;
    try {
      await addMessage(ctx, chat.id, "user", input.content);
      userStored = true;
    } catch (e) {
      // The chat was deleted while the upstream opened.
      s.close();
      if (!(await chatExists(ctx, chat.id))) throw notFound("chat", chat.id);
      throw e;
    }
  };
  /** Once: stores the reply so far and charges its tokens (awaited before the stream's end, so the reply is stored when the client sees [DONE]). */
  const end = async () => {
    if (ended) return;
    ended = true;
    source?.close();
    if (metersTokens && reply) ctx.rateLimiter.charge(principal.keyId, countTokens(reply));
    // The chat may have been deleted while its reply streamed: then there is
    // nothing to store into (the insert would fail on the foreign key, and
    // the client would get an in-band "FOREIGN KEY constraint failed"
    // instead of [DONE]).
    try {
      if (userStored && (await chatExists(ctx, chat.id))) await addMessage(ctx, chat.id, "assistant", reply);
    } catch (e) {
      ctx.log.error("chat reply not stored", { chat_id: chat.id, error: String(e) });
    }
  };

  if (opened !== STILL_OPENING) {
    try {
      await storeUser(opened);
    } catch (e) {
      abort.abort();
      release();
      throw e;
    }
  }
  const early = opened === STILL_OPENING;
  async function* events() {
    try {
      if (!source) {
        let late: ReplySource | Response;
        try {
          late = await opening;
        } catch (e) {
          throw e instanceof ApiError ? e : new InBandError(new ApiError("upstream_error", `Upstream ${model.upstreamName} failed to answer`).body());
        }
        if (late instanceof Response)
          throw new InBandError(await late.json().catch(() => new ApiError("upstream_error", `Upstream ${model.upstreamName} refused the request (${late.status})`).body()));
        // The client left while the upstream opened: store nothing.
        if (abort.signal.aborted) return late.close();
        await storeUser(late);
      }
      for await (const chunk of source!.chunks) {
        reply += (chunk as Delta).choices?.[0]?.delta?.content ?? "";
        yield chunk;
      }
    } finally {
      await end();
    }
  }
  return sseResponse(events(), {
    headers,
    hold: streamHold(ctx.db, principal.keyId),
    keepAliveMs: ctx.config.sseKeepAliveMs,
    keepAliveFirst: early,
    onClose: () => {
      abort.abort();
      release();
      void end();
    },
  });
}

function generatorSource(chunks: AsyncGenerator<Record<string, unknown>>): ReplySource {
  return { chunks, close: () => void chunks.return(undefined).catch(() => {}) };
}

/** Opens an upstream stream: its chunk objects (the `data` of its events), or the Response of an upstream 4xx. */
async function upstreamReply(model: Parameters<typeof callUpstream>[0]["model"], body: Record<string, unknown>, signal: AbortSignal): Promise<ReplySource | Response> {
  const res = await callUpstream({ model, path: chatCompletions.path, body, clientSignal: () => signal });
  if (!res.ok) {
    const failure = await upstreamFailure(model, res);
    if (failure instanceof ApiError) throw failure;
    return failure;
  }
  if (!res.body) throw new ApiError("upstream_error", `Upstream ${model.upstreamName} answered without a body`);
  const reader = res.body.getReader();
  const deadline = streamDeadline(res);
  let closed = false;
  // Not only in the generator's finally: a generator that never started does not run it.
  const close = () => {
    if (closed) return;
    closed = true;
    deadline.onEnd();
    reader.cancel().catch(() => {});
  };
  const events = new SseDataReader();
  const chunks = (async function* () {
    try {
      for (;;) {
        let read: Awaited<ReturnType<typeof reader.read>>;
        try {
          read = await reader.read();
        } catch {
          // Its idle timeout or a dropped connection, said as such (not "internal error").
          throw streamFailure(res);
        }
        const { value, done } = read;
        if (!done) deadline.onChunk();
        for (const data of done ? events.finish() : events.push(value)) {
          if (data === "[DONE]") return;
          yield JSON.parse(data) as Record<string, unknown>;
        }
        if (done) return;
      }
    } finally {
      close();
    }
  })();
  return { chunks, close };
}

// POST /chats/{id}/stream: stores the user message, streams the assistant
// reply as SSE chunks, and stores the reply when the stream ends — or what
// was produced so far when the client disconnects (generation stops then).
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import { ApiError } from "../errors";
import { newId, nowSeconds } from "../ids";
import { admit, resolveModel } from "../inference/admission";
import { planEcho } from "../inference/echo";
import { echoChunks } from "../inference/echoStream";
import { sseResponse } from "../inference/sse";
import { callUpstream, upstreamFailure } from "../inference/upstream";
import { addMessage, getChat, history } from "./service";

const KEEP_ALIVE_MS = 15_000;

interface Delta {
  choices?: { delta?: { content?: string | null } }[];
}

export async function streamReply(
  ctx: AppContext,
  principal: Principal,
  chatId: string,
  input: { content: string; max_tokens?: number; temperature?: number },
  request: Request,
): Promise<Response> {
  const chat = getChat(ctx, principal.project, chatId);
  if (input.content.length === 0) throw new ApiError("invalid_value", "content must not be empty", { param: "content" });
  const model = resolveModel(ctx, chat.model, "chat");
  const messages = [...history(ctx, chat), { role: "user", content: input.content }];
  const body: Record<string, unknown> = { model: chat.model, messages, stream: true };
  if (input.max_tokens !== undefined) body.max_tokens = input.max_tokens;
  if (input.temperature !== undefined) body.temperature = input.temperature;
  const plan = model.kind === "echo" ? planEcho(body) : null;
  const { headers, release } = await admit(ctx, principal, model, plan?.promptTokens ?? 0, request.signal);
  const abort = new AbortController();
  let source: AsyncGenerator<Record<string, unknown>>;
  try {
    source =
      plan !== null
        ? echoChunks(body, newId("chatcmpl-"), nowSeconds(), { latencyMs: model.latencyMs, tokensPerSecond: model.tokensPerSecond }, abort.signal, plan)
        : await upstreamChunks(ctx, model, body, abort.signal);
  } catch (e) {
    release();
    throw e;
  }
  addMessage(ctx, chat.id, "user", input.content);
  let reply = "";
  let stored = false;
  const store = () => {
    if (stored) return;
    stored = true;
    addMessage(ctx, chat.id, "assistant", reply);
  };
  async function* events() {
    try {
      for await (const chunk of source) {
        reply += (chunk as Delta).choices?.[0]?.delta?.content ?? "";
        yield chunk;
      }
    } finally {
      store();
    }
  }
  return sseResponse(events(), {
    headers,
    keepAliveMs: KEEP_ALIVE_MS,
    onClose: () => {
      abort.abort();
      release();
      store();
    },
  });
}

/** Opens an upstream stream and yields its chunk objects (parsing `data:` lines). */
async function upstreamChunks(ctx: AppContext, model: Parameters<typeof callUpstream>[0]["model"], body: Record<string, unknown>, signal: AbortSignal) {
  const res = await callUpstream({ model, path: "/chat/completions", body, signal });
  if (!res.ok || !res.body) {
    const failure = await upstreamFailure(model, res);
    if (failure instanceof ApiError) throw failure;
    throw new ApiError("upstream_error", `Upstream ${model.upstreamName} refused the request (HTTP ${res.status}): ${(await failure.text()).slice(0, 500)}`);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  return (async function* () {
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        let nl: number;
        while ((nl = buf.indexOf("\n")) !== -1) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          yield JSON.parse(data) as Record<string, unknown>;
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  })();
}

// POST /v1/messages (docs/CONTRACT.md §22). For a model whose upstream
// speaks Anthropic's API itself (`api: "anthropic"`), the request passes
// through as sent, like any other pass-through (src/inference/upstream/proxy.ts).
// For every other model (the built-ins, OpenAI-speaking upstreams) it is
// translated to a chat completion (./request.ts) and answered by the chat
// route's own service, the same path /v1/chat/completions takes (the same
// checks, admission, rate limits, scheduling and upstream handling), and its
// answer translated back (./message.ts, or ./stream.ts for a stream).
import type { Principal } from "../auth/verify";
import { chatCompletions } from "../chatCompletions/service";
import type { AppContext } from "../context";
import { ApiError, anthropicErrorBody } from "../errors";
import { forgetRawBody } from "../http/jsonBody";
import { requestIdOf } from "../http/requestId";
import { newId } from "../ids";
import { resolveModel } from "../inference/admission/admit";
import { promptTokensOf } from "../inference/builtin/tokens";
import { proxyUpstream } from "../inference/upstream/proxy";
import { messages as messagesKind } from "./kind";
import { toMessage } from "./message";
import { toChatRequest } from "./request";
import { messageStream } from "./stream";

/** What of the chat answer's headers the message answer keeps: its own body's framing is not among them. */
const DROPPED_HEADERS = new Set(["content-type", "content-length", "transfer-encoding", "connection", "cache-control"]);

function headersOf(res: Response, request: Request): Record<string, string> {
  const out: Record<string, string> = {};
  res.headers.forEach((v, k) => {
    if (!DROPPED_HEADERS.has(k)) out[k] = v;
  });
  const id = requestIdOf(request);
  out["x-request-id"] = id;
  // Anthropic's SDKs read the request id from `request-id`.
  out["request-id"] = id;
  return out;
}

/** The prompt's tokens as offpeak counts them, for a Messages body (the system text too): for rate limits before the call. */
function promptTokensOfMessages(body: Record<string, unknown>): number {
  const system = typeof body.system === "string" ? [{ content: body.system }] : Array.isArray(body.system) ? [{ content: body.system }] : [];
  return promptTokensOf([...system, ...(Array.isArray(body.messages) ? body.messages : [])]);
}

export async function createMessage(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response> {
  const model = resolveModel(ctx, body.model, messagesKind);
  if (model.api === "anthropic") {
    if (body.stream != null && typeof body.stream !== "boolean") throw new ApiError("invalid_value", "stream: must be a boolean", { param: "stream" });
    const res = await proxyUpstream(ctx, principal, { model, kind: messagesKind, body, stream: body.stream === true, promptTokens: promptTokensOfMessages(body), request });
    res.headers.set("request-id", requestIdOf(request));
    return res.ok ? res : anthropicError(res, request);
  }
  const chat = toChatRequest(body);
  // The chat service would send the client's raw text upstream where the model name is unchanged: it is not the chat request.
  forgetRawBody(request);
  const res = await chatCompletions(ctx, principal, chat, request);
  if (!res.ok) return anthropicError(res, request);
  const head = { id: newId("msg_"), model: model.id, inputTokens: promptTokensOf(chat.messages) };
  if (chat.stream === true) return messageStream(res, head, headersOf(res, request), ctx.config.sseKeepAliveMs);
  const message = toMessage(await res.json(), head);
  return new Response(JSON.stringify(message), { headers: { ...headersOf(res, request), "content-type": "application/json" } });
}

/**
 * An error the chat service (or an upstream) answered with a Response,
 * not thrown (an upstream's 4xx, passed on with its status): the same
 * status and headers, the body in Anthropic's shape (a body in it already,
 * from an `api: "anthropic"` upstream, stays as it is).
 */
export async function anthropicError(res: Response, request: Request): Promise<Response> {
  const text = await res.text();
  let parsed: { type?: unknown; error?: { message?: unknown } } | null = null;
  try {
    parsed = JSON.parse(text);
  } catch {}
  const body =
    parsed?.type === "error"
      ? text
      : JSON.stringify(anthropicErrorBody(res.status, typeof parsed?.error?.message === "string" ? parsed.error.message : text.slice(0, 2000) || `HTTP ${res.status}`));
  return new Response(body, { status: res.status, headers: { ...headersOf(res, request), "content-type": "application/json" } });
}

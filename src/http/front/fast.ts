// A chat completion on a front thread (./protocol.ts says who does what):
// the body is read and checked here, the main thread is asked once (key,
// model, rate limits, slot), the upstream is called here and its answer
// passed on here, with the same helpers and in the same order as the main
// thread's own pass-through (src/inference/upstream/call.ts and proxy.ts),
// so a client cannot tell which thread answered it
// (test/http-front.test.ts asks both).
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { chatBody, checkMessages, checkStreamFields } from "../../chatCompletions/fields";
import { chatCompletions as chatKind } from "../../endpoints/chatCompletions";
import { ApiError, errorResponse, schemaFailure } from "../../errors";
import { promptTokensOf } from "../../inference/builtin/tokens";
import { requireModel } from "../../inference/modelField";
import { authorizationOf } from "../../auth/plugin";
import type { StreamHold } from "../../auth/revocations";
import type { UpstreamAnswer } from "../../inference/upstream/answer";
import { Deadline } from "../../inference/upstream/deadline";
import { CallFailure, classify } from "../../inference/upstream/fate";
import { StreamUsage, answerTokens, attachDeadline, passThrough, upstreamFailure, upstreamText } from "../../inference/upstream/interactive";
import { postJson } from "../../inference/upstream/transport";
import { jsonOnly, limitJsonBody, rawBodyOf } from "../jsonBody";
import type { Answer, Ask, Done, EarlyFailure, Go, Reply } from "./protocol";

/** The front thread's side of the conversation with the main thread (./entry.ts). */
export interface MainDesk {
  ask(ask: Omit<Ask, "t" | "id">, id: number, clientSignal: AbortSignal): Promise<Reply>;
  failed(id: number, failure: CallFailure): Promise<Answer>;
  done(done: Omit<Done, "t">): void;
  end(id: number, tokens: number): void;
  /** The hold that ends request `id`'s stream when its key is revoked. */
  hold(id: number): StreamHold;
  nextId(): number;
}

const check = TypeCompiler.Compile(chatBody);

/**
 * Authorization headers the main thread accepted here: their requests are
 * read before they are asked about. Only that: every request's key is still
 * checked by the main thread. Forgotten whenever keys change (a revocation:
 * forgetKeys), so a revoked key is refused before its body is read, as
 * without front threads. Bounded.
 */
const knownKeys = new Set<string>();
const MAX_KNOWN_KEYS = 10_000;

/** Bumped by forgetKeys: a key accepted by an ask that began before is not taken as known. */
let keysEpoch = 0;

/** Keys changed on the main thread (one was revoked): every key is checked before its body is read again. */
export function forgetKeys(): void {
  keysEpoch++;
  knownKeys.clear();
}

function earlyOf(e: unknown, stage: "body" | "fields", request: Request): EarlyFailure {
  if (e instanceof ApiError) return { kind: "error", code: e.code, message: e.message, param: e.param, headers: e.headers, stage };
  // Not a client mistake: the client went away while sending, or a fault of ours (logged by the main thread).
  if (request.signal.aborted) return { kind: "gone" };
  return { kind: "internal", message: String((e as Error)?.stack ?? e) };
}

export const answerOf = (a: Answer): Response => new Response(a.body, { status: a.status, headers: a.headers });

/** DONE for a request answered without an upstream answer (an error, the client gone). */
const doneWithout = (id: number, status: number, seconds: number, error?: string): Omit<Done, "t"> => ({
  id,
  status,
  seconds,
  fate: null,
  upstreamStatus: null,
  tokens: 0,
  streaming: false,
  ...(error === undefined ? {} : { error }),
});

/**
 * Answers POST {base}/chat/completions. `relayToMain` sends the request
 * (with the body read here) to the main thread when its model is not an
 * upstream's (the built-ins run there).
 */
export async function serveChat(request: Request, peer: string | null, main: MainDesk, maxJsonBytes: number, relayToMain: (body: string | undefined) => Promise<Response>): Promise<Response> {
  const t0 = performance.now();
  const auth = authorizationOf(request.headers);
  // A key this thread has not seen accepted is checked before the body is
  // read (docs/CONTRACT.md §16: without a valid key nothing is read); a known one is
  // checked again with the request, in the one ask.
  if (auth === null || !knownKeys.has(auth)) {
    const askedAt = keysEpoch;
    const id = main.nextId();
    const reply = await main.ask({ url: request.url, auth, peer, early: null, model: undefined, stream: false, promptTokens: 0, keyOnly: true }, id, request.signal);
    if ("answer" in reply) {
      main.done(doneWithout(id, reply.answer.status, (performance.now() - t0) / 1000));
      return answerOf(reply.answer);
    }
    if (knownKeys.size >= MAX_KNOWN_KEYS) knownKeys.clear();
    // Not if keys changed while it was asked about: the key may be the one revoked.
    if (keysEpoch === askedAt) knownKeys.add(auth!);
  }
  const id = main.nextId();
  limitJsonBody(request, maxJsonBytes);
  let body: Record<string, unknown> | null = null;
  let early: EarlyFailure | null = null;
  let stream = false;
  let promptTokens = 0;
  try {
    body = await jsonOnly({ request });
    requireModel({ body });
    if (!check.Check(body)) throw schemaFailure(check.Errors(body).First());
  } catch (e) {
    early = earlyOf(e, "body", request);
  }
  if (body && !early) {
    try {
      checkMessages(body);
      stream = checkStreamFields(body);
      promptTokens = promptTokensOf(body.messages);
    } catch (e) {
      early = earlyOf(e, "fields", request);
    }
  }
  const reply = await main.ask({ url: request.url, auth, peer, early, model: body?.model, stream, promptTokens }, id, request.signal);
  const seconds = () => (performance.now() - t0) / 1000;
  if ("relay" in reply) return relayToMain(rawBodyOf(request));
  if ("answer" in reply) {
    main.done(doneWithout(id, reply.answer.status, seconds()));
    return answerOf(reply.answer);
  }
  if (!("go" in reply)) throw new Error("a key-only reply to a full ask");
  // The main thread holds a slot for this request until it hears DONE: it hears it whatever happens here.
  let told = false;
  const tell: MainDesk["done"] = (done) => {
    told = true;
    main.done(done);
  };
  try {
    return await callUpstream(request, id, body!, stream, reply.go, { ...main, done: tell }, seconds);
  } catch (e) {
    if (!told) main.done(doneWithout(id, 500, seconds(), String((e as Error)?.stack ?? e)));
    throw e;
  }
}

async function callUpstream(request: Request, id: number, body: Record<string, unknown>, stream: boolean, go: Go, main: MainDesk, seconds: () => number): Promise<Response> {
  // Filled in from the thread's routes when the main thread sent none (./entry.ts).
  const route = go.route!;
  const named = { upstreamName: route.upstreamName, timeoutMs: route.timeoutMs };
  const deadline = new Deadline(route.timeoutMs, () => request.signal);
  const raw = rawBodyOf(request);
  const payload = raw !== undefined && body.model === route.upstreamModel ? raw : JSON.stringify({ ...body, model: route.upstreamModel });
  let res: UpstreamAnswer;
  try {
    res = await postJson(route, chatKind.path, payload, deadline);
  } catch (e) {
    const failure = new CallFailure(e, deadline.timedOut, deadline.clientGone());
    deadline.clear();
    if (failure.clientGone) {
      main.done(doneWithout(id, 499, seconds()));
      return new Response(null, { status: 499 });
    }
    const answer = await main.failed(id, failure);
    main.done(doneWithout(id, answer.status, seconds()));
    return answerOf(answer);
  }
  attachDeadline(res, named, deadline);
  const verdict = classify(res);
  const fate = verdict.kind === "answer" ? null : verdict;
  const upstreamStatus = res.status;
  const done = (response: Response, tokens = 0, streaming = false): Response => {
    main.done({ id, status: response.status, seconds: seconds(), fate, upstreamStatus, tokens, streaming });
    return response;
  };
  try {
    if (!res.ok) {
      const failure = await upstreamFailure(named, res, go.headers);
      if (failure instanceof ApiError) return done(errorResponse(failure, go.requestId));
      failure.headers.set("x-request-id", go.requestId);
      return done(failure);
    }
    if (stream && res.body) {
      const usage = go.metersTokens ? new StreamUsage(chatKind.readStreamEvent) : null;
      let headers: Headers;
      try {
        headers = new Headers({ "content-type": res.headers.get("content-type") ?? "text/event-stream", "cache-control": "no-cache", ...go.headers, "x-request-id": go.requestId });
      } catch (e) {
        await res.body.cancel().catch(() => {});
        throw e;
      }
      const end = () => {
        usage?.finish();
        main.end(id, usage?.completionTokens ?? 0);
      };
      return done(new Response(passThrough(res, end, usage ? (c) => usage.push(c) : undefined, main.hold(id)), { headers }), 0, true);
    }
    const text = await upstreamText(res);
    const tokens = answerTokens(named, chatKind, text, go.metersTokens);
    return done(new Response(text, { headers: { "content-type": "application/json", ...go.headers, "x-request-id": go.requestId } }), tokens);
  } catch (e) {
    if (e instanceof ApiError) {
      // As the main thread's error mapping does: the key's rate-limit headers on every inference answer.
      for (const [k, v] of Object.entries(go.headers)) e.headers[k] ??= v;
      return done(errorResponse(e, go.requestId));
    }
    if (request.signal.aborted) return done(new Response(null, { status: 499 }));
    const answer = errorResponse(new ApiError("internal_error", `Internal server error (request ${go.requestId})`), go.requestId);
    main.done({ id, status: 500, seconds: seconds(), fate, upstreamStatus, tokens: 0, streaming: false, error: String((e as Error)?.stack ?? e) });
    return answer;
  }
}

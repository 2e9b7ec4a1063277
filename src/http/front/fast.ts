// A chat completion on a front thread (./protocol.ts says who does what):
// the body is read and checked here, then the main thread's own
// pass-through runs here (src/inference/upstream/pass.ts), admitted by
// message to the main thread (FrontAdmission: one ASK, one DONE, an END
// for a stream; an ELSEWHERE for a replica that refused the call), so a
// client cannot tell which thread answered it (test/http-front.test.ts
// asks both).
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { chatBody, checkMessages, checkStreamFields } from "../../chatCompletions/fields";
import { chatCompletions as chatKind } from "../../endpoints/chatCompletions";
import { ApiError, errorResponse, schemaFailure } from "../../errors";
import { promptTokensOf } from "../../inference/builtin/tokens";
import { requireModel } from "../../inference/modelField";
import { authorizationOf } from "../../auth/plugin";
import type { StreamHold } from "../../auth/revocations";
import type { SlotOutcome } from "../../inference/admission/slotCells";
import type { CallFailure, Fate } from "../../inference/upstream/fate";
import { passUpstream, type AdmissionPort, type Admitted } from "../../inference/upstream/pass";
import type { UpstreamTarget } from "../../inference/upstream/transport";
import { jsonOnly, limitJsonBody, rawBodyOf } from "../jsonBody";
import type { Answer, Ask, Done, EarlyFailure, Reply } from "./protocol";

/** The front thread's side of the conversation with the main thread (./entry.ts). */
export interface MainDesk {
  ask(ask: Omit<Ask, "t" | "id">, id: number, clientSignal: AbortSignal): Promise<Reply>;
  failed(id: number, failure: CallFailure): Promise<Answer>;
  /** The call never reached its replica: another to try (the main thread counted the failure), or null. */
  elsewhere(id: number, failure: CallFailure): Promise<{ baseUrl: string; ownClient: boolean } | null>;
  done(done: Omit<Done, "t">): void;
  end(id: number, tokens: number): void;
  /** The hold that ends request `id`'s stream when its key is revoked. */
  hold(id: number): StreamHold;
  /** The prompt's prefix key for a model that spreads over several replicas (protocol.ts Ask.prefix), else null. */
  prefixOf(body: Record<string, unknown>): number | null;
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

const answerOf = (a: Answer): Response => new Response(a.body, { status: a.status, headers: a.headers });

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
    const reply = await main.ask({ url: request.url, auth, peer, early: null, model: undefined, stream: false, promptTokens: 0, prefix: null, keyOnly: true }, id, request.signal);
    if ("answer" in reply) {
      main.done({ id, status: reply.answer.status, seconds: (performance.now() - t0) / 1000, fate: null, upstreamStatus: null, tokens: 0, streaming: false });
      return answerOf(reply.answer);
    }
    if (knownKeys.size >= MAX_KNOWN_KEYS) knownKeys.clear();
    // Not if keys changed while it was asked about: the key may be the one revoked.
    if (keysEpoch === askedAt) knownKeys.add(auth!);
  }
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
  const prefix = body && !early ? main.prefixOf(body) : null;
  const port = new FrontAdmission(main, request, { url: request.url, auth, peer, early, model: body?.model, stream, promptTokens, prefix }, t0);
  let res: Response;
  try {
    // A body that failed its checks is never sent: the main thread answers the ask with its error.
    res = await passUpstream(port, { kind: chatKind, body: body ?? {}, raw: rawBodyOf(request), stream, clientSignal: () => request.signal });
  } catch (e) {
    if (e === RELAY) return relayToMain(rawBodyOf(request));
    res = port.errorAnswer(e);
  }
  port.done(res.status);
  return res;
}

/** The main thread answers a request's ask by relaying it: a built-in model, or the thread's first request for a model of several replicas (protocol.ts Ask.prefix). */
const RELAY = new Error("relayed to the main thread");

/** An answer the main thread made (its error, in its words): thrown through the pass-through, sent as it is. */
class Answered {
  constructor(readonly answer: Answer) {}
}

/**
 * The admission port (src/inference/upstream/pass.ts) of a front thread:
 * each step by message to the main thread, which runs its own
 * (src/inference/upstream/mainAdmission.ts): admit is the ASK and its
 * REPLY; what became of the call and of the answer go in the one DONE (a
 * failed call asks how to answer: FAILED); a stream's end in END.
 */
class FrontAdmission implements AdmissionPort {
  private readonly id: number;
  private requestId: string | null = null;
  private headers: Record<string, string> = {};
  /** The model's upstream key (its replicas share it), for a target elsewhere. */
  private apiKey: string | null = null;
  private fate: Fate | null = null;
  private upstreamStatus: number | null = null;
  private tokens = 0;
  private streaming = true;
  private error: string | undefined = undefined;
  /** A stream that ended before its DONE went (a revocation that came first): its END follows the DONE. */
  private endedEarly: number | null = null;
  private doneSent = false;

  constructor(
    private readonly main: MainDesk,
    private readonly request: Request,
    private readonly ask: Omit<Ask, "t" | "id">,
    private readonly t0: number,
  ) {
    this.id = main.nextId();
  }

  async admit(): Promise<Admitted> {
    const reply = await this.main.ask(this.ask, this.id, this.request.signal);
    if ("relay" in reply) throw RELAY;
    if ("answer" in reply) throw new Answered(reply.answer);
    if (!("go" in reply)) throw new Error("a key-only reply to a full ask");
    const go = reply.go;
    // Filled in from the thread's routes when the main thread sent none (./entry.ts).
    const route = go.route!;
    this.requestId = go.requestId;
    this.headers = go.headers;
    this.apiKey = route.apiKey;
    const target = go.replica ? { baseUrl: go.replica.baseUrl, apiKey: route.apiKey, ownClient: go.replica.ownClient } : route;
    return { target, upstream: route, upstreamModel: route.upstreamModel, headers: go.headers, metersTokens: go.metersTokens, requestId: go.requestId };
  }

  answered(status: number, fate: Fate): void {
    this.upstreamStatus = status;
    this.fate = fate.kind === "answer" ? null : fate;
  }

  async failed(failure: CallFailure): Promise<never> {
    throw new Answered(await this.main.failed(this.id, failure));
  }

  cancelled(): void {}

  async elsewhere(failure: CallFailure): Promise<UpstreamTarget | null> {
    const next = await this.main.elsewhere(this.id, failure);
    return next && { baseUrl: next.baseUrl, apiKey: this.apiKey, ownClient: next.ownClient };
  }

  settle(_outcome: SlotOutcome, tokens: number): void {
    // The main thread measures the slot by the upstream's status (DONE).
    this.tokens = tokens;
    this.streaming = false;
  }

  streamEnded(tokens: number): void {
    if (this.doneSent) this.main.end(this.id, tokens);
    else this.endedEarly = tokens;
  }

  hold(): StreamHold {
    return this.main.hold(this.id);
  }

  /** What the pass-through threw, answered as the main thread's error mapping answers it (src/app.ts). */
  errorAnswer(e: unknown): Response {
    this.streaming = false;
    if (e instanceof Answered) return answerOf(e.answer);
    const requestId = this.requestId ?? "req_unknown";
    if (e instanceof ApiError) {
      // The key's rate-limit headers on every inference answer.
      for (const [k, v] of Object.entries(this.headers)) e.headers[k] ??= v;
      return errorResponse(e, requestId);
    }
    if (this.request.signal.aborted) return new Response(null, { status: 499 });
    // A fault of ours: the main thread logs it.
    this.error = String((e as Error)?.stack ?? e);
    return errorResponse(new ApiError("internal_error", `Internal server error (request ${requestId})`), requestId);
  }

  /** The answer went out with `status` (the main thread: its request line, metrics, the slot, tokens, the upstream's health). */
  done(status: number): void {
    const { id, fate, upstreamStatus, tokens, streaming, error } = this;
    this.main.done({ id, status, seconds: (performance.now() - this.t0) / 1000, fate, upstreamStatus, tokens, streaming, ...(error === undefined ? {} : { error }) });
    this.doneSent = true;
    if (this.endedEarly !== null) this.main.end(id, this.endedEarly);
  }
}

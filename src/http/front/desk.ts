// The main thread's side of the front threads (./protocol.ts says who does
// what): starts them on the public port, answers their asks with the same
// functions its own dispatch runs (the key check and the error mapping of
// src/app.ts, the model, then the admission port of its own pass-through:
// src/inference/upstream/mainAdmission.ts), keeps each admitted request's
// admission until the front thread says it ended, running the port's steps
// as its messages say, and writes their request lines and metrics. Also
// the relay socket (./relayServer.ts), where front threads send every
// other request.
//
// Why: on a many-core machine one thread doing every request's socket and
// byte work is what limits the chat pass-through (docs/CONTRACT.md §20: 0.52–0.60× a
// naive proxy on 16 cores, whose fetch runs on a second thread). Front
// threads take that work; the main thread keeps only the state.
import { requestIdOf } from "../requestId";
import type { DirectHooks } from "../direct";
import { principalOf } from "../../auth/plugin";
import { routeScope } from "../../auth/routeScopes";
import { watchKeys } from "../../auth/verify";
import type { AppContext } from "../../context";
import { chatCompletions as chatKind } from "../../endpoints/chatCompletions";
import { ApiError, type ErrorCode } from "../../errors";
import { resolveModel } from "../../inference/admission/admit";
import { UNMEASURED, slotOutcome } from "../../inference/admission/slotCells";
import type { ModelEntry } from "../../inference/registry";
import { ANSWER } from "../../inference/upstream/fate";
import { spreadsOver } from "../../inference/upstream/call";
import { MainAdmission } from "../../inference/upstream/mainAdmission";
import { m } from "../../metrics";
import type { RequestObserver } from "../../metrics/http";
import { threadSettings } from "../../threadSettings";
import { FRONT_WORKER } from "../../workers";
import { pathOf } from "../path";
import { startRelayServer, type Handler } from "./relayServer";
import { Outbox, batchOf, type Answer, type Ask, type Done, type Go, type Failed, type FrontInit, type FrontMessage, type MainMessage, type ModelRoute } from "./protocol";

export interface FrontThreads {
  /** Stops the front threads' listeners (answers under way are cut, as the main thread's stop cuts its own) and the relay socket. */
  stop(): Promise<void>;
}

/**
 * What the main thread's request functions (the key check, admission, the
 * error mapping, the request line) read of a request a front thread asked
 * about: its method, URL, Authorization header and signal. Not a Request:
 * making one and an AbortController for its signal was 13% of the main
 * thread's samples (a profile under wrk: docs/benchmarks/history.md); those four are all they read,
 * and the signal is made only when something reads it (a wait for a slot).
 */
class AskedRequest {
  readonly method = "POST";
  readonly headers: { get(name: string): string | null };
  private controller: AbortController | null = null;
  private left = false;

  constructor(
    readonly url: string,
    authorization: string | null,
  ) {
    this.headers = { get: (name) => (name.toLowerCase() === "authorization" ? authorization : null) };
  }

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.left) this.controller.abort();
    }
    return this.controller.signal;
  }

  /** The client left: a wait for a slot ends. */
  gone(): void {
    this.left = true;
    this.controller?.abort();
  }
}

/** A request a front thread asked about, until it ended there. */
interface Held {
  /** An AskedRequest, as the functions that take a Request see it. */
  request: Request;
  asked: AskedRequest;
  peer: string | null;
  /** Its admission, once admitted: the port's steps run on it as the thread's messages say. */
  admission?: MainAdmission;
  /** Ends the key's hold on the request's stream. */
  unhold?: () => void;
}

export async function startFrontThreads(
  ctx: AppContext,
  opts: { count: number; port: number; hostname: string; handler: Handler; hooks: DirectHooks; observe: RequestObserver; fastPaths: string[] },
): Promise<FrontThreads> {
  if (ctx.config.fetchConcurrency < MIN_FETCH_CONCURRENCY)
    ctx.log.warn("front threads relay each request with a fetch, and this process runs at most BUN_CONFIG_MAX_HTTP_REQUESTS of those at once: open streams (batch events, chat sessions) past it hold every other relayed request", {
      max_http_requests: ctx.config.fetchConcurrency,
      hint: "leave BUN_CONFIG_MAX_HTTP_REQUESTS unset (serve raises it) or set it higher, or set OFFPEAK_HTTP_THREADS=0",
    });
  const relay = await startRelayServer(ctx.config.dataDir, opts.handler);
  const desks: FrontDesk[] = [];
  for (let i = 0; i < opts.count; i++) desks.push(new FrontDesk(ctx, opts, i));
  const testCrashPath = threadSettings().testFrontCrashPath;
  const init = (index: number): FrontInit => ({
    index,
    port: opts.port,
    hostname: opts.hostname,
    relay: relay.socket,
    dataDir: ctx.config.dataDir,
    maxJsonBytes: ctx.config.maxJsonBytes,
    fastPaths: opts.fastPaths,
    testCrashPath,
  });
  // A key revoked (here, or elsewhere and seen here): the threads check every key before reading a body again.
  const unwatch = watchKeys(ctx.db, () => {
    for (const d of desks) d.forgetKeys();
  });
  try {
    await Promise.all(desks.map((d, i) => d.start(init(i))));
  } catch (e) {
    unwatch();
    await Promise.all(desks.map((d) => d.stop()));
    await relay.stop();
    throw e;
  }
  return {
    async stop() {
      unwatch();
      await Promise.all(desks.map((d) => d.stop()));
      await relay.stop();
    },
  };
}

const SCOPE = routeScope("POST", chatKind.path);

/** Below this many fetches at once (BUN_CONFIG_MAX_HTTP_REQUESTS) front threads warn at start. */
const MIN_FETCH_CONCURRENCY = 4096;

/**
 * One run of a front thread: its Worker, what was sent to it and what it
 * asked about. A thread that fails is replaced by a new run; what the old
 * one held is let go, and an answer the main thread was still working out
 * for it (its ask awaited a key lookup or a rate limit) is dropped there:
 * `live` says whether the run still is.
 */
class Run {
  readonly held = new Map<number, Held>();
  /** The models whose route this run's thread has. */
  readonly sent = new WeakSet<ModelEntry>();
  private readonly outbox: Outbox<MainMessage>;
  live = true;

  constructor(readonly worker: Worker) {
    this.outbox = new Outbox<MainMessage>((batch) => {
      if (this.live) worker.postMessage(batch);
    });
  }

  send(m: MainMessage): void {
    if (this.live) this.outbox.push(m);
  }

  /** The thread is gone: its requests' slots and holds are let go. */
  end(): void {
    this.live = false;
    for (const held of this.held.values()) letGo(held);
    this.held.clear();
  }
}

function letGo(held: Held): void {
  held.asked.gone();
  held.admission?.settle(UNMEASURED, 0);
  held.unhold?.();
  held.unhold = undefined;
}

class FrontDesk {
  private run: Run | null = null;
  private readonly answered: () => void;
  private stopping = false;
  private stopped: (() => void) | null = null;

  constructor(
    private readonly ctx: AppContext,
    private readonly opts: { hooks: DirectHooks; observe: RequestObserver },
    private readonly index: number,
  ) {
    this.answered = m.frontRequests.bind([String(index)]);
  }

  /** Starts the thread; if it ever ends but for stop() (an uncaught error there), another run takes its place. */
  start(init: FrontInit): Promise<void> {
    const run = new Run(new Worker(FRONT_WORKER));
    this.run = run;
    const worker = run.worker;
    return new Promise((resolve, reject) => {
      let ready = false;
      worker.onerror = (e) => this.ctx.log.error("front thread failed", { thread: this.index, error: String(e.message ?? e) });
      worker.addEventListener("close", () => {
        run.end();
        if (!ready) return reject(new Error(`front thread ${this.index} ended before it listened`));
        if (this.stopping) return this.stopped?.();
        this.ctx.log.error("front thread ended: starting another", { thread: this.index });
        this.restart(init, 100);
      });
      worker.onmessage = (e: MessageEvent) => {
        const data = e.data as string | { t: "ready" | "stopped" };
        if (typeof data === "string") for (const m of batchOf<FrontMessage>(data)) this.onMessage(run, m);
        else if (data.t === "ready") {
          ready = true;
          resolve();
        } else if (data.t === "stopped") this.stopped?.();
      };
      worker.postMessage(init);
    });
  }

  /** Starts the thread again after `delayMs`, and again (backing off to 5 s) for as long as it does not listen. */
  private restart(init: FrontInit, delayMs: number): void {
    setTimeout(() => {
      if (this.stopping) return;
      this.start(init).catch((e) => {
        this.ctx.log.error("front thread did not start again: trying again", { thread: this.index, error: String(e), in_ms: Math.min(delayMs * 2, 5000) });
        this.restart(init, Math.min(delayMs * 2, 5000));
      });
    }, delayMs);
  }

  /** Keys changed (one revoked): the thread forgets which keys it saw accepted (./fast.ts knownKeys). */
  forgetKeys(): void {
    this.run?.send({ t: "forget-keys" });
  }

  /** Stops taking connections and ends the thread: answers under way are cut, as the main thread's own stop cuts its own. */
  async stop(): Promise<void> {
    this.stopping = true;
    const run = this.run;
    if (!run?.live) return;
    const stopped = new Promise<void>((resolve) => {
      this.stopped = resolve;
      setTimeout(resolve, 2000).unref?.();
    });
    run.worker.postMessage(JSON.stringify([{ t: "stop" }]));
    await stopped;
    run.worker.terminate();
    run.end();
  }

  private onMessage(run: Run, m: FrontMessage): void {
    switch (m.t) {
      case "ask":
        void this.ask(run, m);
        return;
      case "gone":
        run.held.get(m.id)?.asked.gone();
        return;
      case "failed":
        void this.failed(run, m);
        return;
      case "elsewhere": {
        // The call never reached its replica: another one of the model (the failure counted on the one left), or none.
        const next = run.held.get(m.id)?.admission?.elsewhereAfter(m.fate);
        run.send({ t: "reply", id: m.id, elsewhere: next ? { baseUrl: next.baseUrl!, ownClient: next.ownClient ?? false } : null });
        return;
      }
      case "done":
        this.done(run, m);
        return;
      case "end":
        this.end(run, m.id, m.tokens);
        return;
    }
  }

  private async answer(run: Run, id: number, held: Held, error: unknown): Promise<void> {
    const res = this.opts.hooks.answerError("UNKNOWN", error, held.request);
    const answer: Answer = { status: res.status, headers: [...res.headers], body: await res.text() };
    run.send({ t: "reply", id, answer });
  }

  /** As the main thread's dispatch does for its own requests (src/http/direct.ts, chatCompletions/service.ts, then the pass-through's admit), in that order. */
  private async ask(run: Run, a: Ask): Promise<void> {
    const asked = new AskedRequest(a.url, a.auth);
    const request = asked as unknown as Request;
    const held: Held = { request, asked, peer: a.peer };
    run.held.set(a.id, held);
    try {
      const opened = this.opts.hooks.open(request, pathOf(a.url), SCOPE);
      if (opened) await opened;
      if (a.keyOnly) {
        run.held.delete(a.id);
        run.send({ t: "reply", id: a.id, keyOk: true });
        return;
      }
      const early = a.early;
      if (early?.kind === "gone") {
        asked.gone();
        throw new DOMException("The client went away", "AbortError");
      }
      if (early?.kind === "internal") throw new Error(early.message);
      const failure = early && new ApiError(early.code as ErrorCode, early.message, { param: early.param, headers: early.headers });
      if (failure && early.stage === "body") throw failure;
      const model = resolveModel(this.ctx, a.model, chatKind);
      if (failure) throw failure;
      if (model.kind !== "upstream") {
        // The built-ins run on the main thread: the front thread relays the request.
        run.held.delete(a.id);
        run.send({ t: "reply", id: a.id, relay: true });
        return;
      }
      // The replica is chosen here, by the prompt's prefix key the front thread hashed.
      if (a.prefix === null && spreadsOver(model)) {
        // Its prompt chooses among the upstream's replicas, and the thread did
        // not know to hash it: this one is answered here, from its body; the
        // thread hashes the next ones.
        run.held.delete(a.id);
        run.send({ t: "reply", id: a.id, relay: true, spread: { model: model.id, route: this.routeToSend(run, model) } });
        return;
      }
      const admission = new MainAdmission(this.ctx, principalOf(request), { model, path: chatKind.path, prompt: a.prefix ?? 0, promptTokens: a.promptTokens, requestId: requestIdOf(request), clientSignal: () => request.signal });
      const admitted = await admission.admit();
      held.admission = admission;
      // The thread failed while this waited: nobody is there to answer (end() let go of the others already).
      if (!run.live) return letGo(held);
      if (a.stream) held.unhold = admission.hold()(() => run.send({ t: "revoke", id: a.id }));
      const go: Go = { requestId: admitted.requestId, headers: admitted.headers, model: model.id, route: this.routeToSend(run, model), metersTokens: admitted.metersTokens };
      const { baseUrl, ownClient = false } = admitted.target;
      if (baseUrl !== model.baseUrl || ownClient !== (model.ownClient ?? false)) go.replica = { baseUrl: baseUrl!, ownClient };
      if (admission.spread) go.spread = true;
      run.send({ t: "reply", id: a.id, go });
    } catch (e) {
      await this.answer(run, a.id, held, e);
    }
  }

  /**
   * The model's route if the run's thread does not have it yet, else
   * undefined. A model's entry never changes (the registry makes a new one
   * for a new route), so one sent once is sent for good.
   */
  private routeToSend(run: Run, model: ModelEntry): ModelRoute | undefined {
    if (run.sent.has(model)) return undefined;
    run.sent.add(model);
    return {
      // An upstream of replicas alone has none: each go names its replica.
      baseUrl: model.baseUrl ?? "",
      apiKey: model.apiKey,
      ownClient: model.ownClient ?? false,
      upstreamModel: model.upstreamModel ?? model.id,
      upstreamName: model.upstreamName ?? "(unknown)",
      timeoutMs: model.timeoutMs,
    };
  }

  /** The call threw: told to the upstream's health, answered as the main thread's own call answers (upstream/call.ts UpstreamLeg). */
  private async failed(run: Run, f: Failed): Promise<void> {
    const held = run.held.get(f.id);
    if (!held?.admission) return; // its run ended: nobody waits for the answer
    await this.answer(run, f.id, held, held.admission.failedWith(f.fate, f.timedOut));
  }

  private done(run: Run, d: Done): void {
    const held = run.held.get(d.id);
    if (!held) return;
    const admission = held.admission;
    if (d.upstreamStatus !== null) admission?.answered(d.upstreamStatus, d.fate ?? ANSWER);
    if (d.error) this.ctx.log.error("unhandled error", { request_id: requestIdOf(held.request), method: "POST", path: pathOf(held.request.url).slice(0, 200), error: d.error });
    this.answered();
    const peer = held.peer;
    this.opts.observe(held.request, { requestIP: () => (peer ? { address: peer } : null) }, d.status, d.seconds);
    if (d.streaming) return;
    admission?.settle(d.upstreamStatus === null ? UNMEASURED : slotOutcome(d.upstreamStatus), d.tokens);
    held.unhold?.();
    run.held.delete(d.id);
  }

  private end(run: Run, id: number, tokens: number): void {
    const held = run.held.get(id);
    if (!held) return;
    held.admission?.streamEnded(tokens);
    held.unhold?.();
    run.held.delete(id);
  }
}

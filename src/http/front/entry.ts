// A front thread (a Worker; ./protocol.ts says who does what): serves HTTP
// on the main thread's port (SO_REUSEPORT), answers chat completions for
// upstream models itself and relays every other request to the main
// thread. It loads only what that needs: no config, no database.
import type { Server } from "bun";
import { ApiError, errorResponse } from "../../errors";
import { prefixKey } from "../../inference/replicas/pick";
import { classify, type CallFailure } from "../../inference/upstream/fate";
import { pathOf, routable } from "../path";
import { forgetKeys, serveChat, type MainDesk } from "./fast";
import { Outbox, batchOf, type Answer, type FrontInit, type FrontMessage, type MainMessage, type ModelRoute, type Reply } from "./protocol";
import { relay } from "./relay";

declare const self: Worker;

const outbox = new Outbox<FrontMessage>((batch) => self.postMessage(batch));
const post = (m: FrontMessage, now = false) => outbox.push(m, now);

/** Each model's route, as the main thread last sent it. */
const routes = new Map<string, ModelRoute>();
/** The models whose upstream spreads over several replicas, as the main thread last said (Go.spread): their asks carry the prompt's prefix key. */
const spread = new Set<string>();

let lastId = 0;
/** Asks waiting for the main thread's reply, by id. */
const waiting = new Map<number, (reply: Reply) => void>();
/** Streams that end when their key is revoked, by id; and revocations that came before their stream began. */
const revokers = new Map<number, () => void>();
const revokedEarly = new Set<number>();

const desk: MainDesk = {
  nextId: () => ++lastId,
  ask(ask, id, clientSignal) {
    return new Promise<Reply>((resolve) => {
      const gone = () => post({ t: "gone", id });
      clientSignal.addEventListener("abort", gone, { once: true });
      waiting.set(id, (reply) => {
        clientSignal.removeEventListener("abort", gone);
        resolve(reply);
      });
      post({ t: "ask", id, ...ask });
      // Gone already (while its body was read): the abort event will not come again.
      if (clientSignal.aborted) gone();
    });
  },
  failed(id, failure: CallFailure) {
    return new Promise<Answer>((resolve) => {
      waiting.set(id, (reply) => resolve("answer" in reply ? reply.answer : { status: 500, headers: [], body: "" }));
      // Classified here: the failure's error object does not cross threads.
      post({ t: "failed", id, fate: classify(failure), timedOut: failure.timedOut });
    });
  },
  elsewhere(id, failure: CallFailure) {
    return new Promise((resolve) => {
      waiting.set(id, (reply) => resolve("elsewhere" in reply ? reply.elsewhere : null));
      post({ t: "elsewhere", id, fate: classify(failure) });
    });
  },
  done(done) {
    // A request answered whole has no stream to end: a revocation that raced its answer is forgotten.
    if (!done.streaming) revokedEarly.delete(done.id);
    // A whole answer's slot is free before the client has the answer (as on the main thread, which releases it first).
    post({ t: "done", ...done }, !done.streaming);
  },
  end(id, tokens) {
    revokers.delete(id);
    revokedEarly.delete(id);
    post({ t: "end", id, tokens }, true);
  },
  prefixOf(body) {
    const id = body.model as string;
    if (!spread.has(id)) return null;
    const route = routes.get(id);
    return route ? prefixKey(route.upstreamModel, body) : null;
  },
  hold: (id) => (end) => {
    if (revokedEarly.delete(id)) queueMicrotask(end);
    else revokers.set(id, end);
    return () => revokers.delete(id);
  },
};

let server: Server<undefined> | null = null;

self.onmessage = (event: MessageEvent) => {
  const data = event.data as string | FrontInit;
  if (typeof data !== "string") return start(data);
  for (const m of batchOf<MainMessage>(data)) take(m);
};

function take(m: MainMessage): void {
  switch (m.t) {
    case "reply": {
      if ("go" in m) {
        if (m.go.route) routes.set(m.go.model, m.go.route);
        else m.go.route = routes.get(m.go.model);
        if (m.go.spread) spread.add(m.go.model);
        else spread.delete(m.go.model);
      } else if ("relay" in m && m.spread) {
        if (m.spread.route) routes.set(m.spread.model, m.spread.route);
        spread.add(m.spread.model);
      }
      const resolve = waiting.get(m.id);
      waiting.delete(m.id);
      resolve?.(m);
      return;
    }
    case "revoke": {
      const end = revokers.get(m.id);
      if (end) end();
      else {
        // Before its stream began (bounded: one that raced an end is never looked for).
        if (revokedEarly.size >= 10_000) revokedEarly.clear();
        revokedEarly.add(m.id);
      }
      return;
    }
    case "forget-keys":
      forgetKeys();
      return;
    case "stop":
      // Stop taking connections; the main thread ends the thread once this says so (answers under way are cut, as its own stop cuts its own).
      void server?.stop(false);
      server = null;
      self.postMessage({ t: "stopped" });
      return;
  }
}

function start(init: FrontInit): void {
  const fast = new Set(init.fastPaths);
  const to = { socket: init.relay, dataDir: init.dataDir, spool: `downloads-front-${init.index}` };
  server = Bun.serve({
    port: init.port,
    hostname: init.hostname,
    reusePort: true,
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    idleTimeout: 255,
    fetch(request, srv) {
      if (init.testCrashPath !== null && pathOf(request.url) === init.testCrashPath)
        setTimeout(() => {
          throw new Error("test: a front thread fails");
        });
      const peer = srv.requestIP(request)?.address ?? null;
      // An odd request (a Host the router would misread) is relayed: the main thread puts it right (src/http/path.ts).
      if (request.method === "POST" && routable(request) === request && fast.has(pathOf(request.url)))
        return serveChat(request, peer, desk, init.maxJsonBytes, (body) => relay(request, to, peer, body)).catch((e) =>
          request.signal.aborted ? new Response(null, { status: 499 }) : errorResponse(new ApiError("internal_error", `Internal server error (${(e as Error)?.message ?? e})`), "req_unknown"),
        );
      return relay(request, to, peer);
    },
  });
  self.postMessage({ t: "ready" });
}

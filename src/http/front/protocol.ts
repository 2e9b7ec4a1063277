// What front threads (./entry.ts) and the main thread (./desk.ts) say to
// each other. With `server.http_threads` > 0 the front threads are the
// listeners, on one port (SO_REUSEPORT: the kernel spreads connections
// over them), and the main thread keeps the state. A front thread does a
// chat completion's socket and byte work itself: reading and checking the
// body, the call to the upstream, the answer; it asks the main thread once
// per request (the key, the model, rate limits and a slot: ASK, answered by
// REPLY) and tells it once when the answer went out (DONE: the request log
// and metrics, the slot, tokens against tpm, the upstream's health) and,
// for a stream, once more when it ended (END). A call its replica refused
// asks for another replica of the model (ELSEWHERE). Every other request is
// relayed whole to the main thread's own handler over a Unix socket
// (./relay.ts), so it is answered exactly as without front threads.
//
// Imports only types: both sides load it.
import type { Fate } from "../../inference/upstream/fate";

/** The relay socket's header that carries the client's address (for the request log). Set by the front thread, read only on the relay socket. */
export const PEER_HEADER = "x-offpeak-peer";

/**
 * The relay socket's answer header that says where a download's bytes lie
 * on the disk ({path, start, end} as JSON, src/storage/diskBlob.ts): the
 * front thread sends them from the file itself, with their Content-Length,
 * and the body does not cross the socket. Set only by the main thread, read
 * only from the relay socket.
 */
export const DISK_BYTES_HEADER = "x-offpeak-disk-bytes";

/** Sent to a front thread when it starts. */
export interface FrontInit {
  port: number;
  hostname: string;
  /** Which front thread (0…): its spool folder and metrics label. */
  index: number;
  /** The main thread's relay socket's path. */
  relay: string;
  /** The data directory (a spool folder for downloads passed on: ./relay.ts). */
  dataDir: string;
  maxJsonBytes: number;
  /** The main thread's paths of the routes front threads answer themselves (chat completions under each API base). */
  fastPaths: string[];
  /** Tests only (threadSettings testFrontCrashPath): a request for this path makes the thread fail. */
  testCrashPath: string | null;
}

/** Why a request's body could not be taken on the front thread: answered after the key check, in the order the main thread's dispatch checks. */
export type EarlyFailure =
  | {
      kind: "error";
      /** An ApiError's. */
      code: string;
      message: string;
      param: string | null;
      /** The error's own headers (a 413 closes the connection: its body was never read). */
      headers: Record<string, string>;
      /** "body": before the model is looked up (JSON, schema); "fields": after (messages, stream). */
      stage: "body" | "fields";
    }
  /** The client went away while sending it. */
  | { kind: "gone" }
  /** A fault of ours (the main thread logs it and answers 500). */
  | { kind: "internal"; message: string };

export interface Ask {
  t: "ask";
  id: number;
  url: string;
  /** The Authorization header, or null. */
  auth: string | null;
  /** The client's address. */
  peer: string | null;
  early: EarlyFailure | null;
  model: unknown;
  stream: boolean;
  promptTokens: number;
  /**
   * The prompt's prefix key (src/inference/replicas/pick.ts prefixKey, with
   * the model's upstream name), for a model the main thread said spreads
   * over several replicas (Go.spread); else null. A null for such a model
   * is relayed: the main thread hashes it from the body (the thread learns
   * the model spreads, and hashes the next ones).
   */
  prefix: number | null;
  /** Check the key only (its body not read yet): answered with keyOk, or with the 401/403. */
  keyOnly?: boolean;
}

/** The client left while its ask was waiting (for a slot): the main thread gives up the wait. */
export interface Gone {
  t: "gone";
  id: number;
}

/** The upstream call threw (`fate`); the main thread tells its health and answers with the error to send. */
export interface Failed {
  t: "failed";
  id: number;
  fate: Fate;
  timedOut: boolean;
}

/** The upstream call never reached its replica (refused: fate.ts neverSent); the main thread counts it and names another replica to try (Reply `elsewhere`). */
export interface Elsewhere {
  t: "elsewhere";
  id: number;
  fate: Fate;
}

/** The answer went out with `status`. `streaming`: an END follows when the stream ends. */
export interface Done {
  t: "done";
  id: number;
  status: number;
  seconds: number;
  /** The upstream answer's head as the classifier read it (null: an answer, or no call was made). */
  fate: Fate | null;
  /** The upstream answer's status (to count and to measure the slot by); null when no call was answered. */
  upstreamStatus: number | null;
  /** Completion tokens to charge against tpm (whole answers). */
  tokens: number;
  streaming: boolean;
  /** A fault of ours on the front thread (the main thread logs it, as its own error mapping does). */
  error?: string;
}

export interface End {
  t: "end";
  id: number;
  tokens: number;
}

export type FrontMessage = Ask | Gone | Failed | Elsewhere | Done | End;

/** An answer made on the main thread (errors), sent as is. */
export interface Answer {
  status: number;
  headers: [string, string][];
  body: string;
}

/** How to reach a model's upstream: sent to a front thread with its first request for the model (again for a new registry entry of it), kept there by model id. */
export interface ModelRoute {
  baseUrl: string;
  apiKey: string | null;
  ownClient: boolean;
  upstreamModel: string;
  upstreamName: string;
  timeoutMs: number;
}

/** Call the model's upstream: the main thread admitted the request. */
export interface Go {
  requestId: string;
  /** x-ratelimit-* for the answer. */
  headers: Record<string, string>;
  model: string;
  /** The model's route, when this front thread does not have it yet. */
  route?: ModelRoute;
  /** Whether completion tokens count against a tpm limit (read usage from the answer). */
  metersTokens: boolean;
  /** The replica the main thread chose, where it is not the route's base_url. */
  replica?: { baseUrl: string; ownClient: boolean };
  /** The model's upstream has several replicas taking work: its next asks carry the prompt's prefix key. */
  spread?: true;
}

export type Reply =
  | { t: "reply"; id: number; answer: Answer }
  | { t: "reply"; id: number; go: Go }
  /** Relay the request to the main thread. `spread`: its model spreads over several replicas, and the thread did not know (Ask.prefix null): its next asks for it carry the prefix key. */
  | { t: "reply"; id: number; relay: true; spread?: { model: string; route?: ModelRoute } }
  | { t: "reply"; id: number; keyOk: true }
  /** Another replica for a call that never reached its own (Elsewhere); null: none left (the thread then sends Failed). */
  | { t: "reply"; id: number; elsewhere: { baseUrl: string; ownClient: boolean } | null };

/** The key of request `id` was revoked: its stream ends. */
export interface Revoke {
  t: "revoke";
  id: number;
}

/** Keys changed (one was revoked): forget which keys were seen accepted. */
export interface ForgetKeys {
  t: "forget-keys";
}

export type MainMessage = Reply | Revoke | ForgetKeys | { t: "stop" };

/**
 * Messages go out in batches, one postMessage per turn of the event loop,
 * as JSON text: each postMessage costs both threads a wake-up and a task,
 * and a structured clone of objects costs more than JSON text both ways
 * (main thread, per message: 2.6–3.0 µs to send and 3.5 to receive as
 * objects, 0.7–0.8 and 2.0 as text). postMessage was the largest single
 * cost of a front thread's request on the main thread (24% of its samples
 * with a message each way; docs/benchmarks/history.md).
 */
export class Outbox<T> {
  private items: T[] = [];
  private scheduled = false;

  constructor(private readonly send: (batch: string) => void) {}

  /**
   * `now`: sent at once (with what waits): for what must reach the other
   * thread before this one goes on, e.g. a DONE before the answer goes to
   * the client, so that a slot is free again by the time the client can
   * ask for it (a next request, a look at /metrics).
   */
  push(item: T, now = false): void {
    this.items.push(item);
    if (now) return this.flush();
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flushLater);
  }

  private readonly flushLater = (): void => {
    this.scheduled = false;
    this.flush();
  };

  private flush(): void {
    if (this.items.length === 0) return;
    const items = this.items;
    this.items = [];
    this.send(JSON.stringify(items));
  }
}

/** A batch an Outbox sent. */
export const batchOf = <T>(text: string): T[] => JSON.parse(text) as T[];

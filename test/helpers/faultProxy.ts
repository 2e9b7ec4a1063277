// A bucket that misbehaves on purpose: a loopback HTTP proxy in front of an
// S3-compatible server (s3rver, ./s3.ts) that answers a chosen share of the
// requests it receives with what real S3 answers now and then and expects
// clients to retry (docs/CONTRACT.md §17): 500 InternalError, 503 SlowDown, or a
// connection reset (before any answer, or in the middle of an object's
// body). Everything else is passed through unchanged: method, path, query
// and every header (the Host the client signed with included), so the
// signatures s3rver checks still hold.
//
// Which request gets which fault comes from a seeded generator (mulberry32),
// one draw per request in arrival order: the same seed gives the same
// sequence of faults (which request of several in flight arrives first may
// differ from run to run). A `plan` can also pick faults for chosen calls
// (e.g. the first try of every part upload), which makes a test certain to
// meet them: it sees each call's operation and how many times the same call
// (method, path, upload id and part number) arrived.
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type FaultKind = "internal_error" | "slow_down" | "reset" | "reset_mid_body" | "reset_after_answer";

/** What a plan sees of a call: its operation (see opOf), path, and the how-manieth time the same call arrives (1 for the first). */
export interface FaultCall {
  op: string;
  method: string;
  path: string;
  attempt: number;
}
/** Picks a fault for a call (null: let the shares decide). "reset_after_answer": the bucket does the call, the answer is lost. */
export type FaultPlan = (call: FaultCall) => FaultKind | null;

export interface FaultShares {
  /** 500 InternalError. */
  internalError?: number;
  /** 503 SlowDown. */
  slowDown?: number;
  /** The connection is reset before an answer. */
  reset?: number;
  /** A GET's answer is cut after its head and part of its body (the client must resume). */
  resetMidBody?: number;
}

export interface FaultProxy {
  /** http://127.0.0.1:PORT: the endpoint to give offpeak instead of the bucket's. */
  endpoint: string;
  /** The environment a server needs to reach the bucket through the proxy (the bucket's, with S3_ENDPOINT changed). */
  env: Record<string, string>;
  /** Change the shares (0 for all: a well-behaved bucket). */
  shares: Required<FaultShares>;
  /** Requests received, and faults injected, by kind; `byOp`: faults by kind and operation ("GET", "PUT part", "POST uploads", …). */
  stats: { requests: number; faults: Record<FaultKind, number>; byOp: Record<string, number> };
  /** Faults chosen per call, on top of the shares (null: none). */
  plan: FaultPlan | null;
  /** Faults injected so far, all kinds together. */
  faults(): number;
  stop(): Promise<void>;
}

/** Deterministic [0, 1) numbers from a seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const errorXml = (code: string, message: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>FAULT</RequestId><HostId>fault-proxy</HostId></Error>`;

/** What kind of S3 call a request is, for the fault counts. */
function opOf(req: http.IncomingMessage): string {
  const q = new URL(req.url ?? "/", "http://x").searchParams;
  if (q.has("uploads")) return `${req.method} uploads`;
  if (q.has("partNumber")) return `${req.method} part`;
  if (q.has("uploadId")) return `${req.method} upload`;
  if (q.has("list-type") || q.has("prefix")) return `${req.method} list`;
  return req.method === "GET" && req.headers.range ? "GET range" : String(req.method);
}

/** The same call arriving again: method, path, and the multipart query that names it (not the signature, which changes with the time). */
function callKey(req: http.IncomingMessage): string {
  const u = new URL(req.url ?? "/", "http://x");
  const q = u.searchParams;
  return `${req.method} ${u.pathname} ${q.has("uploads") ? "uploads" : ""} ${q.get("uploadId") ?? ""} ${q.get("partNumber") ?? ""} ${q.get("prefix") ?? ""} ${q.get("continuation-token") ?? ""}`;
}

export async function startFaultProxy(target: { endpoint: string; env: Record<string, string> }, shares: FaultShares = {}, seed = 1): Promise<FaultProxy> {
  const upstream = new URL(target.endpoint);
  const random = mulberry32(seed);
  const current: Required<FaultShares> = { internalError: 0, slowDown: 0, reset: 0, resetMidBody: 0, ...shares };
  const stats = {
    requests: 0,
    faults: { internal_error: 0, slow_down: 0, reset: 0, reset_mid_body: 0, reset_after_answer: 0 } as Record<FaultKind, number>,
    byOp: {} as Record<string, number>,
  };
  const seen = new Map<string, number>();
  const state = { plan: null as FaultPlan | null };
  const sockets = new Set<Socket>();
  const count = (kind: FaultKind, req: http.IncomingMessage) => {
    stats.faults[kind]++;
    const op = `${kind} ${opOf(req)}`;
    stats.byOp[op] = (stats.byOp[op] ?? 0) + 1;
  };
  const reset = (socket: Socket) => {
    // An RST where the runtime can send one; else the connection just ends.
    const s = socket as Socket & { resetAndDestroy?: () => void };
    if (typeof s.resetAndDestroy === "function") s.resetAndDestroy();
    else s.destroy();
  };

  const server = http.createServer((req, res) => {
    stats.requests++;
    const key = callKey(req);
    const attempt = (seen.get(key) ?? 0) + 1;
    seen.set(key, attempt);
    const r = random();
    let at = 0;
    const pick = (share: number) => r >= at && r < (at += share);
    let fault: FaultKind | null = state.plan?.({ op: opOf(req), method: String(req.method), path: new URL(req.url ?? "/", "http://x").pathname, attempt }) ?? null;
    if (fault) {
      // Chosen by the plan.
    } else if (pick(current.internalError)) fault = "internal_error";
    else if (pick(current.slowDown)) fault = "slow_down";
    else if (pick(current.reset)) fault = "reset";
    else if (req.method === "GET" && pick(current.resetMidBody)) fault = "reset_mid_body";
    if (fault === "reset") {
      count(fault, req);
      return reset(req.socket);
    }
    if (fault === "internal_error" || fault === "slow_down") {
      count(fault, req);
      // The request's body is read (and dropped) first: an answer before the body would leave the client mid-send.
      req.resume();
      req.on("end", () => {
        const body = fault === "slow_down" ? errorXml("SlowDown", "Please reduce your request rate.") : errorXml("InternalError", "We encountered an internal error. Please try again.");
        res.writeHead(fault === "slow_down" ? 503 : 500, { "content-type": "application/xml", "content-length": Buffer.byteLength(body) });
        res.end(body);
      });
      return;
    }
    const out = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        if (fault === "reset_after_answer") {
          // The bucket did it; its answer never reaches the client.
          count(fault, req);
          answer.resume();
          return reset(req.socket);
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        const length = Number(answer.headers["content-length"] ?? 0);
        if (fault === "reset_mid_body" && (answer.statusCode ?? 0) < 300 && length > 1) {
          // Half the body (at least one byte), then the connection goes.
          count(fault, req);
          let sent = 0;
          const cut = Math.max(1, Math.floor(length / 2));
          answer.on("data", (chunk: Buffer) => {
            if (sent >= cut) return;
            const part = chunk.subarray(0, cut - sent);
            sent += part.length;
            res.write(part);
            if (sent >= cut) {
              answer.destroy();
              // Let the bytes go out first, then the reset.
              setTimeout(() => reset(req.socket), 5);
            }
          });
          return;
        }
        answer.pipe(res);
      },
    );
    out.on("error", () => reset(req.socket));
    req.pipe(out);
  });
  server.keepAliveTimeout = 5_000;
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    endpoint,
    env: { ...target.env, S3_ENDPOINT: endpoint },
    shares: current,
    stats,
    get plan() {
      return state.plan;
    },
    set plan(p: FaultPlan | null) {
      state.plan = p;
    },
    faults: () => Object.values(stats.faults).reduce((a, b) => a + b, 0),
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

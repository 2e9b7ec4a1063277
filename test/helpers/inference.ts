// Helpers for the inference tests (docs/CONTRACT.md §6–§8): a scripted OpenAI-compatible
// upstream on loopback whose every answer a test can control (streams sent
// piece by piece, held until the test says so, errors, stalls), an SSE
// reader, OpenAI error-body checks and small async utilities.
import { expect } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pollUntil } from "./wait";

export const json = (res: Response): Promise<any> => res.json();
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const CHATCMPL_ID = /^chatcmpl-[0-9A-Za-z]{24}$/;
export const CHAT_ID = /^chat_[0-9A-Za-z]{24}$/;
export const MSG_ID = /^msg_[0-9A-Za-z]{24}$/;
export const REQUEST_ID = /^req_[0-9A-Za-z]{24}$/;

/** Rejects with `what` if `p` does not settle within `ms` (so a buffering server fails instead of hanging). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]);
}

/** Polls until `check()` returns a truthy value, and returns it (./wait.ts: a condition, not the clock; `timeoutMs` is at least 20 s). */
export function eventually<T>(check: () => T | Promise<T>, what: string, timeoutMs = 20_000, everyMs = 20): Promise<T> {
  return pollUntil(check, (v) => !!v, { what, stallMs: Math.max(timeoutMs, 20_000), everyMs, progress: () => 0 });
}

export function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A temp dir for config files, removed by the returned cleanup. */
export function configWriter(prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return {
    write(name: string, config: unknown): string {
      const path = join(dir, name);
      writeFileSync(path, JSON.stringify(config));
      return path;
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Asserts the exact OpenAI error body (docs/CONTRACT.md §3) and returns the error object. */
export async function expectError(res: Response, status: number, expected: { type?: string; code?: string | null; param?: string | null; message?: RegExp | string } = {}) {
  const text = await res.text();
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${text.slice(0, 500)}`);
  expect(res.headers.get("content-type") ?? "").toMatch(/^application\/json\b/);
  expect(res.headers.get("x-request-id") ?? "").toMatch(REQUEST_ID);
  const body = JSON.parse(text);
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  const e = body.error;
  expect(typeof e.message).toBe("string");
  expect(e.message.length).toBeGreaterThan(0);
  const defaultType: Record<number, string> = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    502: "server_error",
    504: "server_error",
    529: "overloaded_error",
  };
  expect(e.type).toBe(expected.type ?? defaultType[status] ?? e.type);
  if (expected.code !== undefined) expect(e.code).toBe(expected.code);
  if (expected.param !== undefined) expect(e.param).toBe(expected.param);
  if (expected.message instanceof RegExp) expect(e.message).toMatch(expected.message);
  else if (typeof expected.message === "string") expect(e.message).toContain(expected.message);
  return e as { message: string; type: string; param: string | null; code: string | null };
}

// ── SSE ──────────────────────────────────────────────────────────────────

export interface SseEvent {
  /** The `data:` payload (joined lines), or null for a comment-only block. */
  data: string | null;
  comments: string[];
}

/**
 * Reads SSE events from a response body one by one. Keeps the raw text seen
 * so far in `raw`, so a test can also assert on the exact bytes.
 */
export function sseReader(res: Response) {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  const state = {
    raw: "",
    done: false,
    /** The next event, or null at the end of the stream. */
    async next(): Promise<SseEvent | null> {
      for (;;) {
        const sep = buf.indexOf("\n\n");
        if (sep !== -1) {
          const block = buf.slice(0, sep);
          buf = buf.slice(sep + 2);
          const data: string[] = [];
          const comments: string[] = [];
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) comments.push(line.slice(1).trim());
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          }
          return { data: data.length ? data.join("\n") : null, comments };
        }
        if (state.done) return null;
        const { value, done } = await reader.read();
        if (done) {
          state.done = true;
          if (buf.trim() !== "") throw new Error(`SSE stream ended inside an event: ${JSON.stringify(buf.slice(0, 200))}`);
          return null;
        }
        state.raw += value;
        buf += value;
      }
    },
    /** The next `data:` event (skipping keep-alive comments), or null at the end. */
    async nextData(): Promise<string | null> {
      for (;;) {
        const e = await state.next();
        if (e === null) return null;
        if (e.data !== null) return e.data;
      }
    },
    /** Every remaining data payload, `[DONE]` included. */
    async rest(): Promise<string[]> {
      const out: string[] = [];
      for (let d = await state.nextData(); d !== null; d = await state.nextData()) out.push(d);
      return out;
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
  return state;
}

/** All data payloads of an SSE response; asserts the stream ends with exactly one `[DONE]`. */
export async function readAllSse(res: Response): Promise<{ chunks: any[]; raw: string }> {
  expect(res.headers.get("content-type") ?? "").toMatch(/^text\/event-stream\b/);
  const r = sseReader(res);
  const data = await r.rest();
  expect(data[data.length - 1]).toBe("[DONE]");
  expect(data.filter((d) => d === "[DONE]").length).toBe(1);
  expect(r.raw.endsWith("data: [DONE]\n\n")).toBe(true);
  return { chunks: data.slice(0, -1).map((d) => JSON.parse(d)), raw: r.raw };
}

// ── scripted upstream ────────────────────────────────────────────────────

export interface UpstreamRequest {
  method: string;
  /** Path without a /v1 prefix, e.g. "/chat/completions". */
  path: string;
  headers: Headers;
  body: any;
  /** The body as received. */
  text: string;
  /** Resolves when the client (offpeak) goes away: request signal aborted or response stream cancelled. */
  gone: Promise<void>;
  isGone(): boolean;
}

export type UpstreamHandler = (r: UpstreamRequest) => Response | Promise<Response>;

export interface ScriptedUpstream {
  url: string;
  /** url + "/v1" */
  baseUrl: string;
  models: string[];
  /** Every POST received (GET /models not included). */
  requests: UpstreamRequest[];
  /** GET /models requests received, with their headers. */
  modelListRequests: Headers[];
  /** How to answer POSTs; default: an echo of the last user message. */
  handler: UpstreamHandler;
  /** When set, GET /models answers this status (e.g. 503: the upstream is "down"). */
  modelsStatus: number | null;
  /** Resolves with the next POST received (or the first one not yet taken). */
  nextRequest(): Promise<UpstreamRequest>;
  reset(): void;
  stop(): Promise<void>;
}

export function lastUserText(body: any): string {
  let last = "";
  for (const m of body?.messages ?? []) if (m?.role === "user" && typeof m.content === "string") last = m.content;
  return last;
}

export function upstreamCompletion(body: any, extra: { message?: Record<string, unknown>; usage?: Record<string, unknown> } = {}) {
  const content = lastUserText(body);
  return {
    id: "chatcmpl-upstream-1",
    object: "chat.completion",
    created: 1700000000,
    model: String(body?.model),
    choices: [{ index: 0, message: { role: "assistant", content, refusal: null, ...extra.message }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, ...extra.usage },
  };
}

export const jsonResponse = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });

/** A chunk object as an upstream would stream it. */
export function upstreamChunk(model: string, delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) {
  return { id: "chatcmpl-upstream-s", object: "chat.completion.chunk", created: 1700000000, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra };
}

/**
 * A streamed answer the test pushes piece by piece. `cancelled` resolves
 * when the reader (offpeak) cancels the body, i.e. the connection is gone.
 */
export function pushStream(r: UpstreamRequest, init: { status?: number; headers?: Record<string, string> } = {}) {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const enc = new TextEncoder();
  const cancelled = deferred();
  let closed = false;
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      closed = true;
      cancelled.resolve();
    },
  });
  r.gone.then(() => cancelled.resolve());
  return {
    response: new Response(stream, { status: init.status ?? 200, headers: { "content-type": "text/event-stream", "cache-control": "no-cache", ...init.headers } }),
    /** Sends raw text; false if the stream is already gone. */
    send(text: string): boolean {
      if (closed) return false;
      try {
        controller.enqueue(enc.encode(text));
        return true;
      } catch {
        return false;
      }
    },
    data(obj: unknown): boolean {
      return this.send(`data: ${typeof obj === "string" ? obj : JSON.stringify(obj)}\n\n`);
    },
    close() {
      if (closed) return;
      closed = true;
      try {
        controller.close();
      } catch {}
    },
    cancelled: cancelled.promise,
  };
}

export async function startScriptedUpstream(opts: { models?: string[]; handler?: UpstreamHandler } = {}): Promise<ScriptedUpstream> {
  const defaultHandler: UpstreamHandler = (r) => jsonResponse(upstreamCompletion(r.body));
  const waiting: ((r: UpstreamRequest) => void)[] = [];
  let taken = 0;
  const up = {
    models: opts.models ?? ["up-chat"],
    requests: [] as UpstreamRequest[],
    modelListRequests: [] as Headers[],
    handler: opts.handler ?? defaultHandler,
    modelsStatus: null as number | null,
  } as ScriptedUpstream;

  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 60,
    async fetch(req) {
      let path = new URL(req.url).pathname;
      if (path.startsWith("/v1/")) path = path.slice(3);
      if (req.method === "GET" && path === "/models") {
        up.modelListRequests.push(req.headers);
        if (up.modelsStatus !== null) return jsonResponse({ error: { message: "down", type: "server_error", param: null, code: null } }, up.modelsStatus);
        return jsonResponse({ object: "list", data: up.models.map((id) => ({ id, object: "model", created: 1700000000, owned_by: "scripted" })) });
      }
      let body: any = null;
      const text = await req.text();
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      const gone = deferred();
      let isGone = false;
      const markGone = () => {
        isGone = true;
        gone.resolve();
      };
      if (req.signal.aborted) markGone();
      req.signal.addEventListener("abort", markGone, { once: true });
      const rec: UpstreamRequest = { method: req.method, path, headers: req.headers, body, text, gone: gone.promise, isGone: () => isGone };
      up.requests.push(rec);
      const w = waiting.shift();
      if (w) {
        taken++;
        w(rec);
      }
      return up.handler(rec);
    },
  });
  up.url = `http://127.0.0.1:${server.port}`;
  up.baseUrl = `${up.url}/v1`;
  up.nextRequest = () => {
    if (taken < up.requests.length) return Promise.resolve(up.requests[taken++]!);
    return new Promise((resolve) => waiting.push(resolve));
  };
  up.reset = () => {
    up.requests.length = 0;
    up.modelListRequests.length = 0;
    taken = 0;
    waiting.length = 0;
    up.handler = opts.handler ?? defaultHandler;
    up.modelsStatus = null;
  };
  up.stop = async () => {
    await server.stop(true);
  };
  return up;
}

// Builds the Elysia app from an AppContext. Tests and `offpeak serve` both
// use this; nothing here reads the environment.
import { Elysia } from "elysia";
import pkg from "../package.json";
import { swagger } from "@elysiajs/swagger";
import { authenticate, principalIfKnown, principalOf } from "./auth/plugin";
import { createVerifier, type Verify } from "./auth/verify";
import type { Scope } from "./auth/scopes";
import type { AppContext } from "./context";
import { assignRequestId, requestIdOf } from "./http/requestId";
import { ApiError, databaseUnavailableError, errorResponse, isAnthropicRoute, schemaFailure, type SchemaValueError } from "./errors";
import { databaseUnavailable, unavailableLogger } from "./db/unavailable";
import { pathOf, routable } from "./http/path";
import { isPublic, type PublicRoute } from "./auth/publicRoutes";
import { routeScope } from "./auth/routeScopes";
import { hasScope } from "./auth/scopes";
import { filesRoutes } from "./files/routes";
import { uploadsRoutes } from "./uploads/routes";
import { keysRoutes } from "./keys/routes";
import { batchesRoutes } from "./batches/routes";
import { chatRoute, chatRoutes } from "./chatCompletions/routes";
import { embeddingsRoute, embeddingsRoutes } from "./embeddings/routes";
import { responsesRoute, responsesRoutes } from "./responses/routes";
import { completionsRoute, completionsRoutes } from "./completions/routes";
import { UPSTREAM_ONLY_ROUTES, upstreamOnlyRoutes } from "./upstreamOnly/routes";
import { directInference, type DirectHooks } from "./http/direct";
import { modelsRoutes } from "./models/routes";
import { chatsRoutes } from "./chatSessions/routes";
import { anthropicRoutes } from "./anthropic/routes";
import { messageBatchesRoutes } from "./anthropic/batches/routes";
import { statusRoutes } from "./status/routes";
import { metricsRoutes } from "./metrics/routes";
import { webhooksRoutes } from "./webhooks/routes";
import { upstreamsRoutes } from "./upstreams/routes";
import { meRoutes } from "./keys/me";
import { consoleRoutes, docsRoutes } from "./console/routes";
import { rateLimitHeadersNow } from "./inference/admission/admit";
import { ENDPOINT_KINDS } from "./endpoints";

export const API_BASES = ["/api/v1", "/v1"] as const;


/** The API base a path is under ("/api/v1/…" or "/v1/…", or the base itself), or null. Runs on every request: no closures. */
function apiBaseOf(pathname: string): string | null {
  for (const b of API_BASES) if (pathname.startsWith(b) && (pathname.length === b.length || pathname.charCodeAt(b.length) === 47)) return b;
  return null;
}

/** All routes under one base; mounted once per base path. */
const apiRoutes = (ctx: AppContext, prefix: string) =>
  new Elysia({ prefix })
    .use(filesRoutes(ctx))
    .use(uploadsRoutes(ctx))
    .use(batchesRoutes(ctx))
    .use(chatRoutes(ctx))
    .use(embeddingsRoutes(ctx))
    .use(responsesRoutes(ctx))
    .use(completionsRoutes(ctx))
    .use(upstreamOnlyRoutes(ctx))
    .use(modelsRoutes(ctx))
    .use(chatsRoutes(ctx))
    .use(anthropicRoutes(ctx))
    .use(messageBatchesRoutes(ctx))
    .use(statusRoutes(ctx))
    .use(metricsRoutes(ctx))
    .use(keysRoutes(ctx))
    .use(meRoutes())
    .use(webhooksRoutes(ctx))
    .use(upstreamsRoutes(ctx));

/**
 * What the server answers with: the Elysia app, and before it the direct
 * dispatch of exact POSTs to the inference routes (src/http/direct.ts),
 * which share its verifier, its request opening and its error answers.
 */
export function buildHandler(
  ctx: AppContext,
  publicRoute: PublicRoute = isPublic,
): { routes: readonly { method: string; path: string }[]; fetch: (request: Request) => Response | Promise<Response>; hooks: DirectHooks } {
  const verify = createVerifier(ctx.db, ctx.config.adminKey);
  const app = buildApp(ctx, verify, publicRoute);
  // Also what the main thread runs for the requests front threads ask about (src/http/front/desk.ts).
  const hooks: DirectHooks = {
    open: (request, path, scope) => openRequest(request, verify, publicRoute, path, scope),
    answerError: (code, error, request) => toErrorResponse(ctx, code, error, request),
  };
  const fetch = directInference(ctx, [chatRoute, embeddingsRoute, responsesRoute, completionsRoute, ...UPSTREAM_ONLY_ROUTES], API_BASES, hooks, (request) => app.fetch(request));
  // Every request is read in the one form in which the router and the key check see the same path.
  return { routes: app.routes, fetch: (request) => fetch(routable(request)), hooks };
}

/**
 * Every request starts here (Elysia's onRequest, or the direct dispatch):
 * it gets its id; unless it is on the public list (src/auth/publicRoutes.ts)
 * its key is checked (401/403) before anything else runs. Fail closed: a
 * path outside the API base needs a valid key too (a valid key then meets
 * the 404 of an unknown route).
 */
function openRequest(request: Request, verify: Verify, publicRoute: PublicRoute, path: string, scope?: Scope | null): void | Promise<void> {
  assignRequestId(request);
  if (publicRoute(request.method, path)) return;
  const base = apiBaseOf(path);
  const needed = scope !== undefined ? scope : base === null ? null : routeScope(request.method, path.slice(base.length));
  const checked = authenticate(request, verify, needed);
  if (checked) return checked.then(() => checkDecodes(path));
  checkDecodes(path);
}

/**
 * The second lock, on the route the router matched (its pattern, not the
 * URL): every API route's handler runs only for a key that holds the scope
 * of that route, whatever path the first check read. Admin routes (keys,
 * metrics, webhook endpoints) are refused here to any other key even if
 * the two ever disagreed again.
 */
function checkMatchedRoute(request: Request, route: string): void {
  const base = apiBaseOf(route);
  if (base === null) return; // the public routes: /healthz, /docs, the console
  const principal = principalOf(request);
  const needed = routeScope(request.method, route.slice(base.length));
  if (needed && !hasScope(principal.scopes, needed)) throw new ApiError("insufficient_scope", `This key lacks the '${needed}' scope`);
}

/**
 * `publicRoute` is the public list (src/auth/publicRoutes.ts); a test gives
 * another one to show that the matched-route check holds by itself.
 */
export function buildApp(ctx: AppContext, verify: Verify = createVerifier(ctx.db, ctx.config.adminKey), publicRoute: PublicRoute = isPublic) {
  return (
    new Elysia()
      // The id goes on the answer in withRequestId (server.ts), not through
      // set.headers: any entry there makes Elysia copy every Response a
      // handler returns into a new one with a streamed body.
      .onRequest(({ request }) => openRequest(request, verify, publicRoute, pathOf(request.url)))
      .onBeforeHandle({ as: "global" }, ({ request, route }) => checkMatchedRoute(request, route))
      .onError(({ code, error, request }) => toErrorResponse(ctx, code, error, request))
      .get("/healthz", () => new Response("ok", { headers: { "content-type": "text/plain" } }), { detail: { hide: true } })
      // The OpenAPI document at /docs/json comes from the swagger plugin; its
      // page at /docs (Scalar from a CDN, inline styles) is replaced by ours
      // (src/console/client/docs.html), served from the executable under the
      // console's CSP: in Elysia a later route with the same method and
      // path replaces the earlier one (test/docs.test.ts checks it did).
      .use(
        swagger({
          path: "/docs",
          specPath: "/docs/json",
          documentation: { info: { title: "offpeak", version: pkg.version, description: "OpenAI-compatible Files + Batch API" } },
          exclude: [/^\/v1\//],
        }),
      )
      .use(docsRoutes())
      .use(apiRoutes(ctx, "/api/v1"))
      .use(apiRoutes(ctx, "/v1"))
      // The web console (docs/CONTRACT.md §15) at "/" and its files at "/<name>".
      .use(consoleRoutes())
  );
}

// A path Elysia cannot percent-decode would reach handlers with an
// undefined id; no resource has such a name, so it is a 404 here.
function checkDecodes(path: string): void {
  if (path.includes("%") && !decodes(path)) throw new ApiError("not_found", "No such resource.");
}

function decodes(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/** Puts the request's id on its answer (errors carry it already). */
export function withRequestId(request: Request, res: Response): Response {
  if (res.headers.has("x-request-id")) return res;
  const id = requestIdOf(request);
  try {
    res.headers.set("x-request-id", id);
    return res;
  } catch {
    // Immutable headers (a fetched Response): answer with a copy. A network
    // error (Response.error(), status 0) cannot be copied and has no headers to send.
    if (res.status === 0) return res;
    const headers = new Headers(res.headers);
    headers.set("x-request-id", id);
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
  }
}


const unavailableLogs = new WeakMap<AppContext, ReturnType<typeof unavailableLogger>>();
const unavailableOf = (ctx: AppContext) => {
  let f = unavailableLogs.get(ctx);
  if (!f) unavailableLogs.set(ctx, (f = unavailableLogger((msg, fields) => ctx.log.warn(msg, fields))));
  return f;
};

/** The single place where anything thrown becomes an HTTP answer. */
function toErrorResponse(ctx: AppContext, code: string | number, error: unknown, request: Request): Response {
  const requestId = requestIdOf(request);
  // Anthropic's routes answer in Anthropic's error shape (docs/CONTRACT.md §22), their 401s and 403s too.
  const path = pathOf(request.url);
  const base = apiBaseOf(path);
  const shape = base !== null && isAnthropicRoute(path.slice(base.length)) ? "anthropic" : "openai";
  const answer = (e: ApiError) => errorResponse(withRateLimitHeaders(ctx, request, e), requestId, shape);
  if (error instanceof ApiError) return answer(error);
  switch (code) {
    case "VALIDATION":
      return answer(schemaFailure((error as { valueError?: SchemaValueError }).valueError));
    case "PARSE": {
      // Elysia wraps what a route's parse hook throws; our own error says more.
      const cause = (error as { cause?: unknown }).cause;
      if (cause instanceof ApiError) return answer(cause);
      return answer(new ApiError("invalid_json", "The request body is not valid JSON (or does not match its Content-Type)"));
    }
    case "NOT_FOUND":
      return answer(new ApiError("not_found", `Unknown route: ${request.method} ${pathOf(request.url).slice(0, 200)}`));
  }
  // A client that went away (e.g. while queued for a model) is not a server
  // fault: nobody reads the answer; 499 is what the request log records.
  if (request.signal.aborted || (error as Error)?.name === "AbortError") return new Response(null, { status: 499 });
  // The database not answering is no bug: 503 with retry-after, one log line per few seconds, no stack.
  const down = databaseUnavailable(error);
  if (down) {
    unavailableOf(ctx)("requests", down, { request_id: requestId });
    return answer(databaseUnavailableError());
  }
  ctx.log.error("unhandled error", { request_id: requestId, method: request.method, path: pathOf(request.url).slice(0, 200), error: String((error as Error)?.stack || error) });
  return answer(new ApiError("internal_error", `Internal server error (request ${requestId})`));
}

/** Every endpoint kind's route (src/endpoints), chat-session streams and Anthropic's messages (src/anthropic). */
const INFERENCE_PATH = new RegExp(`^/(?:api/)?v1(?:${ENDPOINT_KINDS.map((k) => k.path).join("|")}|/chats/[^/]+/stream|/messages(?:/count_tokens)?)$`);

/**
 * docs/CONTRACT.md §7 puts the x-ratelimit-* headers on every inference response: an
 * answer refused before admission (a bad body, an unknown model) gets the
 * key's window as it stands (nothing counted). Not on 401/403: no key yet.
 */
function withRateLimitHeaders(ctx: AppContext, request: Request, e: ApiError): ApiError {
  const principal = principalIfKnown(request);
  if (!principal || e.status === 401 || e.status === 403 || !INFERENCE_PATH.test(pathOf(request.url))) return e;
  for (const [k, v] of Object.entries(rateLimitHeadersNow(ctx, principal))) e.headers[k] ??= v;
  return e;
}

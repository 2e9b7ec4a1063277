// Exact POSTs to the inference routes (/v1/chat/completions and the other
// three, under both API bases) are answered without Elysia's per-request
// layers: its context object, the awaited request hook, its body parser
// switch, Clean() over the body and the response mapping. In the chat
// pass-through those are ≈6 µs of CPU of ≈60 a request (bench/ab/proxy-ab.ts,
// the same tree with and without this dispatch, alternating; docs/benchmarks/history.md "Chat completions through a proxy"),
// the largest single cost offpeak adds to a naive proxy.
//
// The steps are Elysia's for these routes, in its order, with the same
// functions: the request is opened (id, key, scope), the body must be JSON
// (jsonOnly), a missing model is missing_field (requireModel), then the
// route's schema (compiled with TypeBox, as Elysia compiles it; its first
// error becomes the same invalid_value), then the endpoint's service.
// Anything thrown is answered by app.ts's one error mapping. Everything
// else (other methods, a trailing slash, every other route) goes to Elysia,
// which also still serves these routes' docs; test/direct-routes.test.ts
// asks both ways the same questions and compares the answers.
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import type { TObject } from "@sinclair/typebox";
import { principalOf } from "../auth/plugin";
import { routeScope } from "../auth/routeScopes";
import type { Scope } from "../auth/scopes";
import type { AppContext } from "../context";
import { requireModel } from "../inference/modelField";
import type { InferenceRoute } from "../inference/route";
import { jsonOnly, limitJsonBody } from "./jsonBody";
import { pathOf } from "./path";

export type Dispatch = (request: Request) => Response | Promise<Response>;

export interface DirectHooks {
  /** Gives the request its id and checks its key for `scope` (throws 401/403). */
  open(request: Request, path: string, scope: Scope | null): void | Promise<void>;
  /** app.ts's error mapping; `code` as Elysia would name the failure ("VALIDATION" reads `valueError`). */
  answerError(code: string, error: unknown, request: Request): Response;
}

interface Entry {
  route: InferenceRoute;
  check: TypeCheck<TObject>;
  /** The scope its key needs, as routeScope says (decided once, not per request). */
  scope: Scope | null;
}

export function directInference(ctx: AppContext, routes: readonly InferenceRoute[], bases: readonly string[], hooks: DirectHooks, fallback: Dispatch): Dispatch {
  const table = new Map<string, Entry>();
  for (const route of routes) {
    const entry = { route, check: TypeCompiler.Compile(route.body), scope: routeScope("POST", route.kind.path) };
    for (const base of bases) table.set(base + route.kind.path, entry);
  }

  const run = async (entry: Entry, request: Request, path: string): Promise<Response> => {
    try {
      const opened = hooks.open(request, path, entry.scope);
      if (opened) await opened;
      const body = await jsonOnly({ request });
      requireModel({ body });
      if (!entry.check.Check(body)) return hooks.answerError("VALIDATION", { valueError: entry.check.Errors(body).First() }, request);
      return await entry.route.handle(ctx, principalOf(request), body, request);
    } catch (error) {
      return hooks.answerError("UNKNOWN", error, request);
    }
  };

  const maxJsonBytes = ctx.config.maxJsonBytes;
  return (request) => {
    // Every request passes here first: Elysia's routes read their JSON bodies under the same limit.
    limitJsonBody(request, maxJsonBytes);
    if (request.method !== "POST") return fallback(request);
    const path = pathOf(request.url);
    const entry = table.get(path);
    return entry ? run(entry, request, path) : fallback(request);
  };
}

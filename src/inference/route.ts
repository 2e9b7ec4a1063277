// The interactive inference routes (chat completions, embeddings, responses,
// completions) all take a JSON body, check the few fields offpeak reads, and
// hand it to their endpoint's service. Each is described once, here as data,
// and served two ways that must answer the same (test/direct-routes.test.ts):
// registered in Elysia like every other route (docs, trailing slashes, HEAD
// and other methods), and dispatched directly for an exact POST
// (src/http/direct.ts), the traffic that matters for throughput.
import type { TObject } from "@sinclair/typebox";
import { Elysia } from "elysia";
import { principalOf } from "../auth/plugin";
import type { Principal } from "../auth/verify";
import type { AppContext } from "../context";
import type { EndpointKind } from "../endpoints/kind";
import { jsonOnly } from "../http/jsonBody";
import { requireModel } from "./modelField";

export interface InferenceRoute {
  kind: EndpointKind;
  /** What offpeak reads of the body (additionalProperties: true, every other field passes through untouched). */
  body: TObject;
  summary: string;
  handle(ctx: AppContext, principal: Principal, body: Record<string, unknown>, request: Request): Promise<Response>;
}

/** The route as an Elysia plugin: JSON only, a missing model is missing_field (not the schema's invalid_value), then the schema. */
export const inferenceRoutePlugin = (ctx: AppContext, route: InferenceRoute) =>
  new Elysia({ detail: { tags: ["inference"] } }).post(
    route.kind.path,
    ({ request, body }) => route.handle(ctx, principalOf(request), body as Record<string, unknown>, request),
    { parse: jsonOnly, transform: requireModel, body: route.body, detail: { summary: route.summary } },
  );

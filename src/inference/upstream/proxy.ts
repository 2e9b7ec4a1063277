// An interactive request for an upstream model, passed through on the main
// thread (docs/CONTRACT.md §6, §13): the same for every endpoint kind that
// answers with JSON or an SSE stream (chat completions, responses,
// completions, Anthropic's messages, the upstream-only kinds). The
// pass-through itself is ./pass.ts, the one a front thread runs too; here
// it is admitted by the main thread's own state (./mainAdmission.ts).
import { requestIdOf } from "../../http/requestId";
import type { Principal } from "../../auth/verify";
import type { AppContext } from "../../context";
import type { EndpointKind } from "../../endpoints/kind";
import { rawBodyOf } from "../../http/jsonBody";
import type { ModelEntry } from "../registry";
import { MainAdmission } from "./mainAdmission";
import { passUpstream } from "./pass";

export interface ProxyRequest {
  model: ModelEntry;
  kind: EndpointKind;
  body: Record<string, unknown>;
  /** Whether the client asked for a stream (checked by the caller). */
  stream: boolean;
  /** The prompt's tokens as offpeak counts them (rate limits are checked before the call). */
  promptTokens: number;
  request: Request;
}

export function proxyUpstream(ctx: AppContext, principal: Principal, { model, kind, body, stream, promptTokens, request }: ProxyRequest): Promise<Response> {
  const clientSignal = () => request.signal;
  const port = new MainAdmission(ctx, principal, { model, path: kind.path, prompt: body, promptTokens, requestId: requestIdOf(request), clientSignal });
  return passUpstream(port, { kind, body, raw: rawBodyOf(request), stream, clientSignal });
}

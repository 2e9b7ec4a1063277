// Routes with a request body take JSON only (SPEC §1, §10 "wrong content
// type"). Elysia would otherwise parse form-urlencoded and multipart bodies
// into objects too, so `model=offpeak-embed&input=x` sent as a form was
// accepted as an embeddings request; and its own JSON parser only knows the
// lower-case media type, while media types are case-insensitive. Used as a
// route `parse` hook: refuses other content types and bodies that are not a
// JSON object with 400, and returns the parsed object. (Elysia wraps what a
// parse hook throws in its ParseError, which the app answers with its
// generic 400 "not valid JSON (or does not match its Content-Type)".)
import { attached } from "../attached";
import { ApiError } from "../errors";

/** The body as the client sent it, for requests that forward it (a proxied call re-sends it as is when it can). */
const rawBodies = attached<string>("rawBody");
export const rawBodyOf = (request: Request): string | undefined => rawBodies.get(request);

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

export async function jsonOnly({ request }: { request: Request }): Promise<Record<string, unknown>> {
  const type = request.headers.get("content-type") ?? "";
  if (!JSON_TYPE.test(type))
    throw new ApiError("invalid_value", `The request body must be JSON with Content-Type: application/json (got ${type ? `'${type.slice(0, 100)}'` : "none"})`);
  let body: unknown;
  try {
    const text = await request.text();
    body = JSON.parse(text);
    rawBodies.set(request, text);
  } catch {
    throw new ApiError("invalid_json", "The request body is not valid JSON");
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw new ApiError("invalid_value", "The request body must be a JSON object");
  return body as Record<string, unknown>;
}

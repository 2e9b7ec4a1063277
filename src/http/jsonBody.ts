// Routes with a request body take JSON only (docs/CONTRACT.md §1, §10 "wrong content
// type"). Elysia would otherwise parse form-urlencoded and multipart bodies
// into objects too, so `model=offpeak-embed&input=x` sent as a form was
// accepted as an embeddings request; and its own JSON parser only knows the
// lower-case media type, while media types are case-insensitive. Used as a
// route `parse` hook: refuses other content types and bodies that are not a
// JSON object with 400, and returns the parsed object. (Elysia wraps what a
// parse hook throws in its ParseError, which the app answers with its
// generic 400 "not valid JSON (or does not match its Content-Type)".)
//
// Every JSON body offpeak reads comes through here, and none is held past
// max_json_bytes (docs/CONTRACT.md §16): request.text() held whatever came, and one
// 400 MB POST to /chat/completions took the server from 119 to 908 MB.
import { attached } from "../attached";
import { ApiError } from "../errors";
import { DEFAULT_MAX_JSON_BYTES } from "../defaults";


/** The body as the client sent it, for requests that forward it (a proxied call re-sends it as is when it can). */
const rawBodies = attached<string>("rawBody");
export const rawBodyOf = (request: Request): string | undefined => rawBodies.get(request);
/** For a route that sends on another body than it read (a translated one, src/anthropic): the raw text no longer stands for it. */
export const forgetRawBody = (request: Request): void => rawBodies.set(request, undefined as unknown as string);

/**
 * The server's max_json_bytes, put on each request by the dispatch in front
 * of Elysia (src/http/direct.ts): a route's parse hook sees the request and
 * nothing of the server. A request without it gets the default, never no limit.
 */
const jsonLimits = attached<number>("maxJsonBytes");
export const limitJsonBody = (request: Request, maxBytes: number): void => jsonLimits.set(request, maxBytes);

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

export async function jsonOnly({ request }: { request: Request }): Promise<Record<string, unknown>> {
  const type = request.headers.get("content-type") ?? "";
  if (!JSON_TYPE.test(type))
    throw new ApiError("invalid_value", `The request body must be JSON with Content-Type: application/json (got ${type ? `'${type.slice(0, 100)}'` : "none"})`);
  const text = await boundedText(request, jsonLimits.get(request) ?? DEFAULT_MAX_JSON_BYTES);
  let body: unknown;
  try {
    body = JSON.parse(text);
    rawBodies.set(request, text);
  } catch {
    throw new ApiError("invalid_json", "The request body is not valid JSON");
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw new ApiError("invalid_value", "The request body must be a JSON object");
  return body as Record<string, unknown>;
}

/**
 * The body as text, at most `maxBytes` of it. A declared Content-Length
 * over the limit is refused before a byte is read, and the connection
 * closed (its body is never read). A chunked body is counted as it comes
 * and refused at the first chunk past the limit; Bun then reads and drops
 * the rest of it natively, without holding it (400 MB after the 413 left
 * the RSS as it was), and the connection stays usable. Closing it instead
 * reset it under a client still sending, which then never saw its 413.
 */
async function boundedText(request: Request, maxBytes: number): Promise<string> {
  const declared = request.headers.get("content-length");
  try {
    if (declared !== null) {
      const n = Number(declared);
      if (n > maxBytes) throw tooLarge(maxBytes, { connection: "close" });
      // Bun frames the body by it (it refuses a request with two of them, or
      // with one and Transfer-Encoding), so text() reads n bytes: the fast path.
      if (Number.isSafeInteger(n)) return await request.text();
    }
    return await countedText(request.body, maxBytes);
  } catch (e) {
    if (e instanceof ApiError) throw e;
    // A body that cannot be read (the client went away mid-body) is answered as before.
    throw new ApiError("invalid_json", "The request body is not valid JSON");
  }
}

async function countedText(body: ReadableStream<Uint8Array> | null, maxBytes: number): Promise<string> {
  if (!body) return "";
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      reader.cancel().catch(() => {});
      throw tooLarge(maxBytes);
    }
    chunks.push(value);
  }
  // TextDecoder, as text() does: UTF-8, a BOM dropped, bad bytes replaced.
  return decoder.decode(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
}

const decoder = new TextDecoder();

const tooLarge = (maxBytes: number, headers: Record<string, string> = {}) =>
  new ApiError("request_too_large", `The request body is larger than ${maxBytes} bytes (max_json_bytes)`, { headers });

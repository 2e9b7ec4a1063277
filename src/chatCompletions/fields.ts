// The fields of a chat completion body that offpeak reads itself, checked
// after the model is known (as OpenAI orders its errors). Here, apart from
// the service: front threads (src/http/front) check them too.
import { Type } from "@sinclair/typebox";
import { ApiError } from "../errors";

/**
 * The route's body schema. Only what we must read is described; every
 * other field passes through to the model untouched (additionalProperties
 * keeps Elysia from dropping it). A missing field is the service's to
 * refuse, with its own message: Elysia cleans a body before checking it,
 * which turns an absent required field into a type error, while the direct
 * dispatch checks the body as sent; only optional fields read the same both ways.
 */
export const chatBody = Type.Object(
  { model: Type.String(), messages: Type.Optional(Type.Array(Type.Unknown(), { description: "Required: a non-empty array of messages." })) },
  { additionalProperties: true },
);

export function checkMessages(body: Record<string, unknown>): void {
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw new ApiError("invalid_value", "messages must be a non-empty array", { param: "messages" });
}

/**
 * offpeak itself reads `stream` and `stream_options` (for every model), so it
 * checks their types: a `stream: "yes"` read as false would be answered with
 * plain JSON while an upstream it is sent on to might stream. null = not given.
 * stream_options without stream:true is refused, as OpenAI refuses it.
 */
export function checkStreamFields(body: Record<string, unknown>): boolean {
  const { stream, stream_options: opts } = body;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") throw new ApiError("invalid_value", "stream must be a boolean", { param: "stream" });
  if (opts !== undefined && opts !== null) {
    if (typeof opts !== "object" || Array.isArray(opts)) throw new ApiError("invalid_value", "stream_options must be an object", { param: "stream_options" });
    const include = (opts as { include_usage?: unknown }).include_usage;
    if (include !== undefined && include !== null && typeof include !== "boolean")
      throw new ApiError("invalid_value", "stream_options.include_usage must be a boolean", { param: "stream_options.include_usage" });
    // As OpenAI does: the options of a stream that is not asked for are a client mistake.
    if (stream !== true) throw new ApiError("invalid_value", "stream_options is only allowed when stream is true", { param: "stream_options" });
  }
  return stream === true;
}

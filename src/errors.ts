// One error type for the whole service, and the one place that maps it to
// HTTP. Services throw ApiError; the app's onError turns anything thrown into
// the OpenAI error body `{error:{message,type,param,code}}`.
const CODES = {
  invalid_value: 400,
  invalid_json: 400,
  missing_field: 400,
  invalid_file: 400,
  duplicate_custom_id: 400,
  webhook_url_not_allowed: 400,
  /** A batch endpoint no model serves (docs/CONTRACT.md §22). */
  unsupported_endpoint: 400,
  invalid_api_key: 401,
  insufficient_scope: 403,
  not_found: 404,
  model_not_found: 404,
  /** A request body that stopped arriving (an upload idle for upload_idle_timeout_s). */
  request_timeout: 408,
  invalid_state: 409,
  /** A replica URL its upstream already has (docs/CONTRACT.md §21). */
  replica_exists: 409,
  /** An Idempotency-Key used before with another request (src/idempotency). */
  idempotency_key_reused: 409,
  file_too_large: 413,
  /** A JSON body over max_json_bytes. */
  request_too_large: 413,
  range_not_satisfiable: 416,
  rate_limit_exceeded: 429,
  internal_error: 500,
  upstream_error: 502,
  upstream_unavailable: 503,
  /** The database does not answer (a restart, a failover, a network cut: docs/CONTRACT.md §17); has retry-after. */
  database_unavailable: 503,
  upstream_timeout: 504,
  overloaded: 529,
} as const;

export type ErrorCode = keyof typeof CODES;

const TYPE_BY_STATUS: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  408: "invalid_request_error",
  409: "conflict_error",
  413: "invalid_request_error",
  416: "invalid_request_error",
  429: "rate_limit_error",
  500: "server_error",
  502: "server_error",
  503: "server_error",
  504: "server_error",
  529: "overloaded_error",
};

export function errorTypeFor(status: number): string {
  return TYPE_BY_STATUS[status] ?? (status >= 500 ? "server_error" : "invalid_request_error");
}

export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly param: string | null;
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message: string, opts: { param?: string | null; headers?: Record<string, string> } = {}) {
    super(message);
    this.code = code;
    this.status = CODES[code];
    this.param = opts.param ?? null;
    this.headers = opts.headers ?? {};
  }

  body() {
    return { error: { message: this.message, type: errorTypeFor(this.status), param: this.param, code: this.code } };
  }
}

export const notFound = (what: string, id: string, param: string | null = null) =>
  new ApiError("not_found", `No ${what} with id '${id.length > 80 ? id.slice(0, 80) + "…" : id}' found`, { param });

/** Seconds a client is told to wait when the database does not answer: a restart takes a few. */
export const DATABASE_RETRY_AFTER_S = 2;

/** The answer to a request that needed the database while it does not answer (src/db/unavailable.ts tells). */
export const databaseUnavailableError = () =>
  new ApiError("database_unavailable", "The database is temporarily unavailable; try again shortly", { headers: { "retry-after": String(DATABASE_RETRY_AFTER_S) } });

export const invalid = (param: string | null, message: string) => new ApiError("invalid_value", message, { param });

/** The first error a body schema check found (TypeBox's ValueError, as Elysia hands it over). */
export interface SchemaValueError {
  path?: string;
  message?: string;
}

/** A body that fails its route's schema: invalid_value, its param the failing field's path ("a.b"). */
export function schemaFailure(ve: SchemaValueError | undefined): ApiError {
  const param = ve?.path ? ve.path.replace(/^\//, "").replace(/\//g, ".") : null;
  const msg = ve ? `${param ? param + ": " : ""}${ve.message}` : "invalid request";
  return new ApiError("invalid_value", msg, { param });
}

/** The shape of an error body: OpenAI's (docs/CONTRACT.md §3), or Anthropic's on its routes (§22). */
export type ErrorShape = "openai" | "anthropic";

export function errorResponse(err: ApiError, requestId: string, shape: ErrorShape = "openai"): Response {
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": requestId, ...err.headers };
  if (err.status === 401) headers["www-authenticate"] = 'Bearer realm="offpeak"';
  if (shape === "anthropic") {
    // Anthropic's SDKs read the request id from `request-id`.
    headers["request-id"] = requestId;
    return new Response(JSON.stringify(anthropicErrorBody(err.status, err.message)), { status: err.status, headers });
  }
  return new Response(JSON.stringify(err.body()), { status: err.status, headers });
}

/** Anthropic's error `type` by HTTP status (docs/CONTRACT.md §22). */
const ANTHROPIC_TYPE_BY_STATUS: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  503: "overloaded_error",
  529: "overloaded_error",
};

export function anthropicErrorType(status: number): string {
  return ANTHROPIC_TYPE_BY_STATUS[status] ?? (status >= 500 ? "api_error" : "invalid_request_error");
}

/** `{type: "error", error: {type, message}}`: what Anthropic's SDKs read (and raise by status). */
export const anthropicErrorBody = (status: number, message: string) => ({ type: "error", error: { type: anthropicErrorType(status), message } });

/**
 * The status an OpenAI error body stands for when none came with it (an
 * error inside a stream, after its 200): by its code when it is one of
 * ours, else by its type.
 */
export function statusOfErrorBody(error: { type?: unknown; code?: unknown } | null | undefined): number {
  const code = error?.code;
  if (typeof code === "string" && Object.hasOwn(CODES, code)) return CODES[code as ErrorCode];
  switch (error?.type) {
    case "authentication_error":
      return 401;
    case "permission_error":
      return 403;
    case "not_found_error":
      return 404;
    case "rate_limit_error":
      return 429;
    case "overloaded_error":
      return 529;
    case "invalid_request_error":
      return 400;
    default:
      return 500;
  }
}

/** Whether a path under the API base is one of Anthropic's routes ("/messages", "/messages/…"), answered in its error shape. */
export const isAnthropicRoute = (path: string): boolean => path.startsWith("/messages") && (path.length === 9 || path.charCodeAt(9) === 47);

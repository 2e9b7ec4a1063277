// Helpers shared by the batch tests: upload a JSONL batch file through the
// official SDK, poll a batch, download and parse result files, and check the
// exactly-once contract of docs/CONTRACT.md §5.
import { expect } from "bun:test";
import OpenAI, { toFile } from "openai";
import { pollUntil as poll } from "./wait";

export const FINAL = ["completed", "failed", "expired", "cancelled"];

/** Every field of the batch record (docs/CONTRACT.md §5), sorted. */
export const BATCH_KEYS = [
  "cancelled_at",
  "cancelling_at",
  "completed_at",
  "completion_window",
  "cost",
  "created_at",
  "endpoint",
  "error_file_id",
  "errors",
  "estimated_completion_at",
  "expired_at",
  "expires_at",
  "failed_at",
  "finalizing_at",
  "id",
  "in_progress_at",
  "input_file_id",
  "metadata",
  "model",
  "object",
  "output_file_id",
  "request_counts",
  "status",
  "status_details",
  "usage",
].sort();

export const BATCH_ID = /^batch_[0-9A-Za-z]{24}$/;
export const BATCH_REQ_ID = /^batch_req_[0-9A-Za-z]{24}$/;

export { sleep } from "./wait";

/**
 * Polls `get` until `done(value)` holds; fails after `stallMs` in which the
 * value did not change at all (./wait.ts: progress, not the clock).
 */
export function pollUntil<T>(get: () => Promise<T>, done: (v: T) => boolean, stallMs = 20_000, everyMs = 50, what = "condition", progress?: (v: T) => unknown): Promise<T> {
  return poll(get, done, { stallMs, everyMs, what, progress });
}

/** A chat line; `text` is what the echo model (and the fake upstream) send back. */
export function chatReq(customId: string, text: string, body: Record<string, unknown> = {}, url = "/v1/chat/completions"): string {
  return JSON.stringify({ custom_id: customId, method: "POST", url, body: { model: "offpeak-echo", messages: [{ role: "user", content: text }], ...body } });
}

export function embedReq(customId: string, input: unknown, body: Record<string, unknown> = {}, url = "/v1/embeddings"): string {
  return JSON.stringify({ custom_id: customId, method: "POST", url, body: { model: "offpeak-embed", input, ...body } });
}

export async function uploadBatchFile(client: OpenAI, lines: string[], name = "batch.jsonl") {
  const text = lines.join("\n") + "\n";
  return client.files.create({ file: await toFile(Buffer.from(text), name), purpose: "batch" });
}

export async function createBatch(client: OpenAI, lines: string[], opts: { endpoint?: string; window?: string; metadata?: Record<string, string> } = {}) {
  const file = await uploadBatchFile(client, lines);
  const batch = await client.batches.create({
    input_file_id: file.id,
    endpoint: (opts.endpoint ?? "/v1/chat/completions") as "/v1/chat/completions",
    completion_window: (opts.window ?? "24h") as "24h",
    ...(opts.metadata ? { metadata: opts.metadata } : {}),
  });
  return { file, batch };
}

/**
 * Polls a batch until its status is one of `statuses`; fails when neither
 * its status nor its request counts moved for `stallMs`.
 */
export function waitBatch(client: OpenAI, id: string, statuses: string[] = FINAL, stallMs = 30_000) {
  return pollUntil(
    () => client.batches.retrieve(id),
    (b) => statuses.includes(b.status),
    stallMs,
    50,
    `batch ${id} to reach ${statuses.join("|")}`,
    (b) => [b.status, b.request_counts],
  );
}

export interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string | null; body: any } | null;
  error: { code: string; message: string } | null;
}

/** Downloads a result file through the SDK and parses its lines ([] for a null id). */
export async function readResults(client: OpenAI, fileId: string | null | undefined): Promise<ResultLine[]> {
  if (!fileId) return [];
  const text = await (await client.files.content(fileId)).text();
  expect(text.endsWith("\n")).toBe(true);
  return text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as ResultLine);
}

/** Each of `ids` appears exactly once across `out` and `err`, and nothing else does. */
export function expectExactlyOnce(ids: string[], out: ResultLine[], err: ResultLine[]): void {
  const seen = new Map<string, number>();
  for (const l of [...out, ...err]) seen.set(l.custom_id, (seen.get(l.custom_id) ?? 0) + 1);
  const dupes = [...seen].filter(([, n]) => n > 1).map(([id]) => id);
  const missing = ids.filter((id) => !seen.has(id));
  const extra = [...seen.keys()].filter((id) => !ids.includes(id));
  expect({ dupes: dupes.slice(0, 10), missing: missing.slice(0, 10), extra: extra.slice(0, 10) }).toEqual({ dupes: [], missing: [], extra: [] });
  expect(out.length + err.length).toBe(ids.length);
}

/** The line shape of docs/CONTRACT.md §5: exactly {id, custom_id, response, error}. */
export function expectLineShape(l: ResultLine): void {
  expect(Object.keys(l).sort()).toEqual(["custom_id", "error", "id", "response"]);
  expect(l.id).toMatch(BATCH_REQ_ID);
  expect(typeof l.custom_id).toBe("string");
  if (l.response) {
    expect(Object.keys(l.response).sort()).toEqual(["body", "request_id", "status_code"]);
    expect(l.error).toBeNull();
  } else {
    expect(l.error).not.toBeNull();
    expect(Object.keys(l.error!).sort()).toEqual(["code", "message"]);
    expect(typeof l.error!.message).toBe("string");
  }
}

// What the engine (./engineReplicas.ts) reads in a request and what it
// answers, in OpenAI's shapes: chat completions, text completions, Responses
// API response objects and embeddings, plain or streamed (SSE).
//
// The content of a request is what it is counted by and what its answer
// echoes: the last user message of a chat request, the prompt of a
// completion, a Responses input string (else its last user item's text),
// the input of an embeddings request. Usage counts words: prompt = words + 3
// (completions: words), completion = words. Embeddings are `dimensions`
// (default 8) numbers hashed from the text, as floats or base64.
//
// A streamed answer is split in two: its head (the headers and the first
// events: the role chunk, response.created and response.in_progress) leaves
// at once, its rest (one delta a word, the end, [DONE]) when `done` resolves
// true; false (the engine was killed) errors the stream.
import { hashOf } from "./engineFaults";

type Content = string | { type?: string; text?: string }[] | null | undefined;
type Message = { role?: string; content?: Content };
export interface ChatBody {
  model?: string;
  messages?: Message[];
  prompt?: string | string[];
  /** /responses: the instructions (its prefix) and the input, a string or a list of items; /embeddings: a string or strings. */
  instructions?: string;
  input?: string | string[] | Message[];
  priority?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean } | null;
  max_tokens?: number;
  dimensions?: number;
  encoding_format?: string;
}

export const textOf = (c: Content): string => (typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => (typeof p?.text === "string" ? p.text : "")).join("") : "");

/** A /responses request's input text: the string, or its items' text joined by "\n". */
export function inputOf(body: ChatBody): string {
  const input = body.input;
  return typeof input === "string" ? input : Array.isArray(input) ? input.map((item) => textOf(typeof item === "string" ? item : item?.content)).join("\n") : "";
}

/** A request's prompt text: its messages' text joined by "\n", its instructions and input, or its `prompt`. */
export function promptOf(body: ChatBody): string {
  if (Array.isArray(body.messages)) return body.messages.map((m) => textOf(m?.content)).join("\n");
  if (body.input !== undefined) return typeof body.instructions === "string" ? `${body.instructions}\n${inputOf(body)}` : inputOf(body);
  return Array.isArray(body.prompt) ? body.prompt.join("\n") : typeof body.prompt === "string" ? body.prompt : "";
}

/** The text of the last message with role "user" ("" when none). */
function lastUser(messages: unknown): string {
  let last = "";
  if (Array.isArray(messages)) for (const m of messages as Message[]) if (m && m.role === "user") last = textOf(m.content);
  return last;
}

/** The content a request is counted by and its answer echoes (see the top). */
export function contentOf(path: string, body: ChatBody): string {
  if (path === "/embeddings") return typeof body.input === "string" ? body.input : JSON.stringify(body.input);
  if (path === "/completions") return typeof body.prompt === "string" ? body.prompt : JSON.stringify(body.prompt);
  if (path === "/responses") return typeof body.input === "string" ? body.input : lastUser(body.input);
  return lastUser(body.messages);
}

const words = (s: string) => (s.trim() === "" ? 0 : s.trim().split(/\s+/).length);

let seq = 0;
const run = Math.random().toString(36).slice(2, 8);
/** An id unique in this process and unlike another process's: `prefix`, then a run tag and a count. */
export const answerId = (prefix: string) => `${prefix}${run}${(++seq).toString(36).padStart(6, "0")}`;

const now = () => Math.floor(Date.now() / 1000);

function chatCompletion(body: ChatBody, content: string, fingerprint: string) {
  const prompt = words(content) + 3;
  const completion = words(content);
  return {
    id: answerId("chatcmpl-fake"),
    object: "chat.completion",
    created: now(),
    model: String(body.model),
    system_fingerprint: fingerprint,
    choices: [{ index: 0, message: { role: "assistant", content, refusal: null }, logprobs: null, finish_reason: "stop" }],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    },
  };
}

function textCompletion(body: ChatBody, content: string, fingerprint: string) {
  const prompt = words(content);
  return {
    id: answerId("cmpl-fake"),
    object: "text_completion",
    created: now(),
    model: String(body.model),
    system_fingerprint: fingerprint,
    choices: [{ text: content, index: 0, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: prompt, total_tokens: 2 * prompt },
  };
}

function embeddings(body: ChatBody) {
  const inputs = Array.isArray(body.input) && body.input.every((x) => typeof x === "string") ? (body.input as string[]) : [contentOf("/embeddings", body)];
  const dims = typeof body.dimensions === "number" ? body.dimensions : 8;
  let tokens = 0;
  const data = inputs.map((text, index) => {
    tokens += words(text);
    const v = new Float32Array(dims);
    for (let i = 0; i < dims; i++) v[i] = ((hashOf(`${text}:${i}`) % 2000) - 1000) / 1000;
    const embedding = body.encoding_format === "base64" ? Buffer.from(v.buffer).toString("base64") : Array.from(v);
    return { object: "embedding", index, embedding };
  });
  return { object: "list", data, model: String(body.model), usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** A Responses API response object whose one message echoes `content`. */
function responseObject(body: ChatBody, content: string) {
  const input = words(content) + 3;
  const output = words(content);
  return {
    id: answerId("resp_fake"),
    object: "response",
    created_at: now(),
    status: "completed",
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    model: String(body.model),
    output: [{ id: "msg_fake", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: content, annotations: [] }] }],
    parallel_tool_calls: true,
    temperature: 1,
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    usage: { input_tokens: input, input_tokens_details: { cached_tokens: 1, cache_write_tokens: 0 }, output_tokens: output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + output },
    metadata: {},
  };
}

/** The plain answer's body for `path` ("/chat/completions", "/completions", "/responses", "/embeddings"). */
export function answerBody(path: string, body: ChatBody, content: string, fingerprint: string): unknown {
  if (path === "/embeddings") return embeddings(body);
  if (path === "/responses") return responseObject(body, content);
  if (path === "/completions") return textCompletion(body, content, fingerprint);
  return chatCompletion(body, content, fingerprint);
}

/** A streamed answer's events: the head (sent at once) and the rest (sent when the work is done). */
function streamEvents(path: string, body: ChatBody, content: string, fingerprint: string): { head: string[]; rest: string[] } {
  const pieces = content.split(/(?=\s)/).filter((p) => p !== "");
  const data = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
  if (path === "/responses") {
    const done = responseObject(body, content);
    const item = done.output[0]!;
    let n = 0;
    const ev = (type: string, fields: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n++, ...fields })}\n\n`;
    const at = { item_id: "msg_fake", output_index: 0, content_index: 0 };
    const started = { ...done, status: "in_progress", output: [], usage: null };
    return {
      head: [ev("response.created", { response: started }), ev("response.in_progress", { response: started })],
      rest: [
        ev("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress", content: [] } }),
        ev("response.content_part.added", { ...at, part: { type: "output_text", text: "", annotations: [] } }),
        ...pieces.map((delta) => ev("response.output_text.delta", { ...at, delta })),
        ev("response.output_text.done", { ...at, text: content }),
        ev("response.content_part.done", { ...at, part: { type: "output_text", text: content, annotations: [] } }),
        ev("response.output_item.done", { output_index: 0, item }),
        ev("response.completed", { response: done }),
      ],
    };
  }
  const usage = body.stream_options?.include_usage === true;
  if (path === "/completions") {
    const c = textCompletion(body, content, fingerprint);
    const chunk = (text: string, finish: string | null) => data({ ...c, choices: [{ text, index: 0, logprobs: null, finish_reason: finish }], usage: null });
    return { head: [chunk("", null)], rest: [...pieces.map((p) => chunk(p, null)), chunk("", "stop"), ...(usage ? [data({ ...c, choices: [], usage: c.usage })] : []), "data: [DONE]\n\n"] };
  }
  const c = chatCompletion(body, content, fingerprint);
  const base = { id: c.id, object: "chat.completion.chunk", created: c.created, model: c.model, system_fingerprint: fingerprint };
  const chunk = (delta: Record<string, unknown>, finish: string | null) => data({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
  return {
    head: [chunk({ role: "assistant", content: "" }, null)],
    rest: [...pieces.map((p) => chunk({ content: p }, null)), chunk({}, "stop"), ...(usage ? [data({ ...base, choices: [], usage: c.usage })] : []), "data: [DONE]\n\n"],
  };
}

const enc = new TextEncoder();

/** A streamed answer (see the top); `answered` is called once its last event is handed over. */
export function streamAnswer(path: string, body: ChatBody, content: string, fingerprint: string, done: Promise<boolean>, headers: Record<string, string>, answered: () => void): Response {
  const { head, rest } = streamEvents(path, body, content, fingerprint);
  const stream = new ReadableStream<Uint8Array>({
    async start(c) {
      c.enqueue(enc.encode(head.join("")));
      if (!(await done)) {
        c.error(new Error("engine killed"));
        return;
      }
      c.enqueue(enc.encode(rest.join("")));
      answered();
      c.close();
    },
  });
  return new Response(stream, { headers: { ...headers, "content-type": "text/event-stream", "cache-control": "no-cache" } });
}

// The Worker of POST /batches/{id}/retry: reads the batch's error file (the
// custom_ids that failed), then its input file, and sends back the original
// request line of every failed custom_id, in input order. Both files come in
// as chunks the main thread reads from storage when asked ("pull"), so this
// Worker needs no access to storage and memory holds only the failed ids and
// about a megabyte of output at a time.
import { readLines } from "../jsonl/lineReader";

declare const self: Worker;

export type RetryToWorker = { type: "start" } | { type: "chunk"; which: "err" | "in"; data: Uint8Array | null };
export type RetryFromWorker =
  | { type: "pull"; which: "err" | "in" }
  | { type: "out"; data: Uint8Array }
  | { type: "done"; lines: number; missing: number }
  | { type: "error"; message: string };

const post = (m: RetryFromWorker, transfer: ArrayBuffer[] = []) => self.postMessage(m, transfer);
const waiting = new Map<string, (c: Uint8Array | null) => void>();

function pulled(which: "err" | "in"): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    pull: async (controller) => {
      const chunk = await new Promise<Uint8Array | null>((resolve) => {
        waiting.set(which, resolve);
        post({ type: "pull", which });
      });
      if (chunk === null) controller.close();
      else controller.enqueue(chunk);
    },
  });
}

const OUT_FLUSH_BYTES = 1 << 20;
const encoder = new TextEncoder();

async function run(): Promise<void> {
  const failed = new Set<string>();
  for await (const lines of readLines(pulled("err")))
    for (const { text } of lines) {
      if (text.trim() === "") continue;
      failed.add((JSON.parse(text) as { custom_id: string }).custom_id);
    }
  let out: string[] = [];
  let outChars = 0;
  let found = 0;
  const flush = () => {
    if (out.length === 0) return;
    const data = encoder.encode(out.join(""));
    out = [];
    outChars = 0;
    post({ type: "out", data }, [data.buffer]);
  };
  for await (const lines of readLines(pulled("in"))) {
    for (const { text } of lines) {
      if (failed.size === 0) break;
      if (text.trim() === "") continue;
      const id = (JSON.parse(text) as { custom_id: string }).custom_id;
      // delete: each custom_id once, even if the error file had it twice.
      if (!failed.delete(id)) continue;
      out.push(text, "\n");
      outChars += text.length + 1;
      found++;
    }
    if (outChars >= OUT_FLUSH_BYTES) flush();
    if (failed.size === 0) break; // every failed line found: the rest of the input is not needed
  }
  flush();
  post({ type: "done", lines: found, missing: failed.size });
}

self.onmessage = (e: MessageEvent<RetryToWorker>) => {
  const m = e.data;
  if (m.type === "start")
    run().catch((err) => post({ type: "error", message: String((err as Error)?.message ?? err) }));
  else {
    const resolve = waiting.get(m.which);
    waiting.delete(m.which);
    resolve?.(m.data);
  }
};

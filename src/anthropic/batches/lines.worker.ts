// Worker side of a message batch's create (./linesClient.ts): the body's
// bytes come in as they are read, the batch input file's lines go back.
// Protocol, one create at a time:
//   {begin, models} → {chunk, bytes}… → {end}
// replies {taken} as each chunk is read (the main thread's backpressure),
// {lines, text} in order, then {done, count} or {refused, error}, after
// which the Worker may take another create.
import { ApiError } from "../../errors";
import type { ChunkReader } from "../../files/multipart";
import { worked } from "../../batches/worker/garbage";
import { requestLines } from "./requestLines";

declare const self: Worker;

/** The chunks of the body being read, as a ChunkReader. */
class Chunks implements ChunkReader {
  private readonly queue: Uint8Array[] = [];
  private ended = false;
  private waiting: (() => void) | null = null;
  push(chunk: Uint8Array | null): void {
    if (chunk) this.queue.push(chunk);
    else this.ended = true;
    this.waiting?.();
    this.waiting = null;
  }
  async read(): Promise<{ done: false; value: Uint8Array } | { done: true }> {
    while (this.queue.length === 0 && !this.ended) await new Promise<void>((r) => (this.waiting = r));
    const value = this.queue.shift();
    if (!value) return { done: true };
    self.postMessage({ type: "taken" });
    return { done: false, value };
  }
}

let chunks: Chunks | null = null;

self.onmessage = (event: MessageEvent) => {
  const msg = event.data as { type: "begin"; models: string[] } | { type: "chunk"; bytes: Uint8Array } | { type: "end" };
  if (msg.type === "chunk") chunks?.push(msg.bytes);
  else if (msg.type === "end") chunks?.push(null);
  else if (msg.type === "begin") {
    const mine = (chunks = new Chunks());
    requestLines(mine, new Set(msg.models), (text) => {
      self.postMessage({ type: "lines", text });
      // The requests read and the lines made of them are garbage once sent: collected on a budget, as a batch Worker's.
      worked(2 * text.length);
    }).then(
      (count) => finish(mine, { type: "done", count }),
      (e) => {
        // Not an ApiError: a fault of ours, answered as one (code null) on the main thread.
        const error = e instanceof ApiError ? { code: e.code, message: e.message, param: e.param } : { code: null, message: String(e), param: null };
        finish(mine, { type: "refused", error });
      },
    );
  }
};

function finish(mine: Chunks, reply: object): void {
  if (chunks === mine) chunks = null;
  self.postMessage(reply);
  // What this create left goes now: the Worker may wait idle for the next (./linesClient.ts).
  Bun.gc(true);
}

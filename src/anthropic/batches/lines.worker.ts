// Worker side of a message batch's create (./linesClient.ts): the body's
// bytes come in as they are read, the batch input file's lines go back.
// Protocol, one create at a time:
//   {begin, models} → {chunk, bytes}… → {end}
// replies {taken} as each chunk is read (the main thread's backpressure),
// {bytes, buffer, length} in order, then {done, count} or {refused, error},
// after which the Worker may take another create. The lines come encoded in
// a few buffers that move to the main thread and back ({buffer, buffer}
// once written): no copy of them and no buffer a piece left to collect,
// and at most BUFFERS pieces on their way to the file.
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

/** Buffers the lines are encoded into, lent to the main thread and given back once written. */
const BUFFERS = 4;
const BUFFER_BYTES = 2 << 20;
const encoder = new TextEncoder();

class Buffers {
  private readonly free: ArrayBuffer[] = [];
  private made = 0;
  private waiting: (() => void) | null = null;
  async take(): Promise<ArrayBuffer> {
    for (;;) {
      const b = this.free.pop();
      if (b) return b;
      if (this.made < BUFFERS) {
        this.made++;
        return new ArrayBuffer(BUFFER_BYTES);
      }
      await new Promise<void>((r) => (this.waiting = r));
    }
  }
  give(b: ArrayBuffer): void {
    this.free.push(b);
    this.waiting?.();
    this.waiting = null;
  }
}

let chunks: Chunks | null = null;
/** A create's own (one refused may leave some with the main thread). */
let buffers = new Buffers();

/** A piece of lines, encoded into lent buffers, to the main thread. */
async function send(text: string): Promise<void> {
  let rest = text;
  while (rest) {
    const buffer = await buffers.take();
    const { read, written } = encoder.encodeInto(rest, new Uint8Array(buffer));
    self.postMessage({ type: "bytes", buffer, length: written }, [buffer]);
    rest = read < rest.length ? rest.slice(read) : "";
  }
}

self.onmessage = (event: MessageEvent) => {
  const msg = event.data as { type: "begin"; models: string[] } | { type: "chunk"; bytes: Uint8Array } | { type: "end" } | { type: "buffer"; buffer: ArrayBuffer };
  if (msg.type === "chunk") chunks?.push(msg.bytes);
  else if (msg.type === "buffer") buffers.give(msg.buffer);
  else if (msg.type === "end") chunks?.push(null);
  else if (msg.type === "begin") {
    const mine = (chunks = new Chunks());
    buffers = new Buffers();
    requestLines(mine, new Set(msg.models), (text) => {
      // The requests read and the lines made of them are garbage once sent: collected on a budget, as a batch Worker's.
      worked(2 * text.length);
      return send(text);
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

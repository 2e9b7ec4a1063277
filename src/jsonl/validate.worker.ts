// Worker side of the upload validator: JSON parsing of every line runs here,
// off the HTTP thread, while the main thread keeps streaming bytes to disk.
// Protocol: {init} → chunks (transferred Uint8Arrays) → {finish}; replies
// {ack, block} per chunk, giving the block back for reuse (and backpressure),
// {failed} once on the first bad
// line (so the upload can stop early), and {result} at the end.
import { BatchFileValidator } from "./batchFileValidator";

declare const self: Worker;

let validator: BatchFileValidator | null = null;
let reportedFailure = false;

self.onmessage = (event: MessageEvent) => {
  const msg = event.data;
  if (msg instanceof Uint8Array) {
    validator!.push(msg);
    self.postMessage({ type: "ack", block: msg }, [msg.buffer as ArrayBuffer]);
    if (validator!.failed && !reportedFailure) {
      reportedFailure = true;
      self.postMessage({ type: "failed" });
    }
  } else if (msg.type === "init") {
    validator = new BatchFileValidator(msg.maxRequests);
    reportedFailure = false;
  } else if (msg.type === "finish") {
    self.postMessage({ type: "result", result: validator!.finish() });
    // This Worker may be kept for the next upload: drop this one's id set now.
    validator = null;
    Bun.gc(false);
  }
};

// Worker side of the upload validator. An upload uses two of these Workers,
// off the HTTP thread, while the main thread keeps streaming bytes to disk:
//
// - the scanner checks every line (BatchFileValidator) and sends each
//   block's custom_ids over a MessagePort to
// - the duplicate finder, which hashes them into its fingerprint set
//   (≈25% of the work, done in parallel instead of after each line).
//
// Scanner protocol (from the main thread): {init, port} → chunks
// (transferred Uint8Arrays) → {finish}; replies {ack, block} per chunk,
// giving the block back for reuse (and backpressure), {failed} once on the
// first bad line (so the upload can stop early), and {result} at the end.
// Confirmation protocol (a Worker of its own, see confirmInWorker in
// validatorClient.ts): {confirm, suspects} → chunks of the stored file →
// {confirm-end}; replies {confirm-ack, bytes} per chunk and {confirmed,
// result} once decided (possibly before the end).
// Finder protocol: {init-finder, port, options}; then only the port speaks
// (id batches, then {end}; each batch goes back over the port once hashed,
// for the scanner to fill again); replies {failed} once when it gives up on
// too many suspects, and {report} after {end}.
import { BatchFileValidator } from "./batchFileValidator";
import { DuplicateConfirmer } from "./confirm";
import { DuplicateFinder, IdBatcher, transferablesOf, type FinderOptions, type IdBatch } from "./duplicateFinder";

declare const self: Worker;

let validator: BatchFileValidator | null = null;
let batcher: IdBatcher | null = null;
let port: MessagePort | null = null;
let reportedFailure = false;

/** The ids gathered so far go to the finder. */
function sendIds(): void {
  const batch = batcher!.take();
  if (batch) port!.postMessage(batch, transferablesOf(batch));
}

let confirmer: DuplicateConfirmer | null = null;
let confirmed = false;

function reportConfirmed(): void {
  if (confirmed || !confirmer?.done) return;
  confirmed = true;
  self.postMessage({ type: "confirmed", result: confirmer.result });
}

self.onmessage = (event: MessageEvent) => {
  const msg = event.data;
  if (msg instanceof Uint8Array && confirmer) {
    confirmer.push(msg);
    self.postMessage({ type: "confirm-ack", bytes: msg.byteLength });
    reportConfirmed();
  } else if (msg instanceof Uint8Array) {
    validator!.push(msg);
    sendIds();
    self.postMessage({ type: "ack", block: msg }, [msg.buffer as ArrayBuffer]);
    if (validator!.failed && !reportedFailure) {
      reportedFailure = true;
      self.postMessage({ type: "failed" });
    }
  } else if (msg.type === "init") {
    port = msg.port as MessagePort;
    const ids = (batcher = new IdBatcher());
    // Batches the finder is done with (the last may come after this upload's end: then it is dropped with its batcher).
    port.onmessage = (e) => ids.recycle(e.data as IdBatch);
    validator = new BatchFileValidator(msg.maxRequests, batcher);
    reportedFailure = false;
  } else if (msg.type === "finish") {
    const result = validator!.finish();
    sendIds();
    // The finder closes the channel when it has read this (closing it here could drop the message).
    port!.postMessage({ type: "end" });
    self.postMessage({ type: "result", result });
    // This Worker may be kept for the next upload: drop this one's state now.
    validator = null;
    batcher = null;
    port = null;
    Bun.gc(false);
  } else if (msg.type === "confirm") {
    confirmer = new DuplicateConfirmer(msg.suspects);
    reportConfirmed();
  } else if (msg.type === "confirm-end") {
    confirmer!.end();
    reportConfirmed();
  } else if (msg.type === "init-finder") {
    runFinder(msg.port as MessagePort, msg.options as FinderOptions);
  }
};

function runFinder(ids: MessagePort, options: FinderOptions): void {
  let finder: DuplicateFinder | null = new DuplicateFinder(options);
  let failed = false;
  ids.onmessage = (event) => {
    const msg = event.data as IdBatch | { type: "end" };
    if ("type" in msg) {
      let report;
      try {
        report = finder!.report();
      } catch (e) {
        // A spill file that cannot be read back (disk full, removed): the upload fails, the Worker is not reused.
        finder!.discard();
        throw e;
      }
      self.postMessage({ type: "report", report });
      ids.close();
      finder = null; // kept Workers must not hold the last upload's set
      Bun.gc(false);
      return;
    }
    finder!.addBatch(msg);
    ids.postMessage(msg, transferablesOf(msg));
    if (finder!.tooManyAt !== null && !failed) {
      failed = true;
      self.postMessage({ type: "failed" });
    }
  };
}

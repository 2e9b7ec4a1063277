// Worker side of the upload validator. An upload uses N + 1 of these
// Workers, off the HTTP thread, while the main thread keeps streaming bytes
// to disk:
//
// - N scanners check lines (BatchFileValidator), each taking whole blocks of
//   the file (cut at line ends on the main thread, ./lineBlocks.ts), and
//   send each block's summary and custom_ids over a MessagePort to
// - the finder, which takes the blocks in the file's order (BlockSequencer,
//   ./sequencer.ts): it numbers their lines, enforces the request limit and
//   hashes the ids into its fingerprint set (≈25% of the work of one scanner,
//   done in parallel instead of after each line).
//
// Scanner protocol (from the main thread): {init-scanner, port} → blocks
// {seq, block, length} (the buffer transferred); replies {ack, block} per
// block, giving the buffer back for reuse (and backpressure), and {failed}
// on a block with a bad line (so the upload can stop early).
// Finder protocol: {init-finder, ports, maxRequests, options}; then the
// ports speak (one ScannedBlock per block; each id batch goes back over its
// port once hashed, for that scanner to fill again); to the main thread
// {progress, sequenced} as blocks are taken in order, {failed} once when the
// file is bad for good (a line, the request limit, too many suspects), and
// {result} after {end, blocks} once every block is in.
// Confirmation protocol (a Worker of its own, see confirmInWorker in
// validatorClient.ts): {confirm, suspects} → chunks of the stored file →
// {confirm-end}; replies {confirm-ack, bytes} per chunk and {confirmed,
// result} once decided (possibly before the end).
import { BatchFileValidator } from "./batchFileValidator";
import { DuplicateConfirmer } from "./confirm";
import { DuplicateFinder, IdBatcher, transferablesOf, type FinderOptions, type IdBatch } from "./duplicateFinder";
import { BlockSequencer, type ScannedBlock } from "./sequencer";

declare const self: Worker;

/** This scanner's upload: its validator (reset per block), its ids' batcher and its port to the finder. */
let scanning: { validator: BatchFileValidator; batcher: IdBatcher; port: MessagePort } | null = null;

/** A block of the file: checked whole, its summary and ids to the finder, its buffer back to the main thread. */
function scanBlock(seq: number, block: Uint8Array<ArrayBuffer>, length: number): void {
  const { validator, batcher, port } = scanning!;
  validator.startBlock(seq === 0);
  validator.push(block.subarray(0, length));
  const summary = validator.endBlock();
  const ids = batcher.take();
  const scanned: ScannedBlock = { seq, ...summary, ids };
  port.postMessage(scanned, ids ? transferablesOf(ids) : []);
  self.postMessage({ type: "ack", block }, [block.buffer]);
  if (summary.error) self.postMessage({ type: "failed" });
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
  if (msg instanceof Uint8Array) {
    confirmer!.push(msg);
    self.postMessage({ type: "confirm-ack", bytes: msg.byteLength });
    reportConfirmed();
  } else if (msg.type === "block") {
    scanBlock(msg.seq, msg.block, msg.length);
  } else if (msg.type === "init-scanner") {
    // A kept Worker's last upload is over (it answered every block): its state goes now.
    scanning?.port.close();
    const port = msg.port as MessagePort;
    const batcher = new IdBatcher();
    // Batches the finder is done with (the last may come after this upload's end: then it is dropped with its batcher).
    port.onmessage = (e) => batcher.recycle(e.data as IdBatch);
    // The request limit is the whole file's: the finder counts.
    scanning = { validator: new BatchFileValidator(Infinity, batcher), batcher, port };
  } else if (msg.type === "release") {
    scanning?.port.close();
    scanning = null;
    Bun.gc(false);
  } else if (msg.type === "confirm") {
    confirmer = new DuplicateConfirmer(msg.suspects);
    reportConfirmed();
  } else if (msg.type === "confirm-end") {
    confirmer!.end();
    reportConfirmed();
  } else if (msg.type === "init-finder") {
    runFinder(msg.maxRequests as number, msg.options as FinderOptions);
  } else if (msg.type === "add-scanner") {
    listen?.(msg.port as MessagePort);
  } else if (msg.type === "end") {
    ending?.(msg.blocks as number);
  }
};

/** The finder's handlers for the main thread's {add-scanner} and {end}. */
let listen: ((port: MessagePort) => void) | null = null;
let ending: ((blocks: number) => void) | null = null;

function runFinder(maxRequests: number, options: FinderOptions): void {
  const ports: MessagePort[] = [];
  let finder: DuplicateFinder | null = new DuplicateFinder(options);
  let sequencer: BlockSequencer | null = new BlockSequencer(maxRequests, finder);
  let failed = false;
  const report = () => {
    if (!sequencer?.done) return;
    let result;
    try {
      result = sequencer.result();
    } catch (e) {
      // A spill file that cannot be read back (disk full, removed): the upload fails, the Worker is not reused.
      finder!.discard();
      throw e;
    }
    self.postMessage({ type: "result", result });
    for (const p of ports) p.close();
    // Kept Workers must not hold the last upload's set.
    finder = null;
    sequencer = null;
    ending = null;
    listen = null;
    Bun.gc(false);
  };
  ending = (blocks) => {
    sequencer!.end(blocks);
    report();
  };
  /** The port each waiting block came in on: its id batch goes back to that scanner once hashed. */
  const from = new Map<number, MessagePort>();
  listen = (port) => {
    ports.push(port);
    port.onmessage = (event) => {
      if (!sequencer) return;
      const block = event.data as ScannedBlock;
      from.set(block.seq, port);
      const taken = sequencer.add(block);
      for (const b of taken) {
        const back = from.get(b.seq)!;
        from.delete(b.seq);
        if (b.ids) back.postMessage(b.ids, transferablesOf(b.ids));
      }
      if (taken.length > 0) self.postMessage({ type: "progress", sequenced: sequencer.sequenced });
      if (sequencer.failed && !failed) {
        failed = true;
        self.postMessage({ type: "failed" });
      }
      report();
    };
  };
}

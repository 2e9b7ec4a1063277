// GET /batches/{id}/events (docs/CONTRACT.md §12): the batch record as an SSE stream,
// again on every change of status, request_counts, status_details or
// estimated_completion_at, closed after a final state.
//
// Many watchers of one batch cost one reader: a batch with watchers has one
// poller that reads its row every POLL_MS, and each record is serialised and
// encoded once and the same bytes are queued to every watcher. A poller reads
// the database, not the runner's memory, so it also sees the work of other
// nodes and of other processes on the same data directory.
//
// Each watcher's stream is held under its key (auth/revocations.ts):
// revoking the key closes that watcher's stream, and only that one.
import { eq } from "drizzle-orm";
import type { StreamHold } from "../auth/revocations";
import type { AppContext } from "../context";
import { FINAL_STATES, batchView, type BatchRow } from "./service";

/** How often a watched batch's row is read. */
const POLL_MS = 250;
/** At most one event per this interval while the batch runs (a final state goes out at once). */
const MIN_GAP_MS = 500;

const encoder = new TextEncoder();
const KEEP_ALIVE = encoder.encode(": keep-alive\n\n");

type Sink = ReadableStreamDefaultController<Uint8Array>;

const isFinal = (status: string) => (FINAL_STATES as readonly string[]).includes(status);
// status_details and the estimate too (docs/CONTRACT.md §18): a batch that stops moving changes no count.
const changeKey = (b: BatchRow) => `${b.status}/${b.total}/${b.completed}/${b.failed}/${b.statusDetailsCode}/${b.statusDetailsMessage}/${b.statusDetailsSince}/${b.estimatedCompletionAt}`;

class Watched {
  /** Each watcher's stream, with the release of its key's hold. */
  readonly sinks = new Map<Sink, (() => void) | null>();
  /** The last event sent (every new watcher gets it first). */
  last: Uint8Array;
  private lastKey: string;
  private lastSentAt = Date.now();
  private lastWriteAt = Date.now();
  private readonly poll: ReturnType<typeof setInterval>;
  private pending: ReturnType<typeof setTimeout> | null = null;
  private done = false;

  constructor(
    private readonly ctx: AppContext,
    private readonly id: string,
    row: BatchRow,
    private readonly onEmpty: () => void,
  ) {
    this.last = this.encode(row);
    this.lastKey = changeKey(row);
    this.poll = setInterval(() => this.read(), POLL_MS);
  }

  get final(): boolean {
    return this.done;
  }

  private encode(row: BatchRow): Uint8Array {
    return encoder.encode(`event: batch\ndata: ${JSON.stringify(batchView(row))}\n\n`);
  }

  private reading = false;

  /** The batch's row now (undefined: it is gone). */
  private async fetchRow(): Promise<BatchRow | undefined> {
    const { batches } = this.ctx.db.t;
    const [row] = await this.ctx.db.select().from(batches).where(eq(batches.id, this.id));
    return row;
  }

  private read(): void {
    // One read at a time: on Postgres a slow answer must not pile reads up.
    if (this.reading || this.done) return;
    this.reading = true;
    this.fetchRow()
      .then(
        (row) => this.onRow(row),
        (e) => this.ctx.log.error("batch events: read failed", { batch_id: this.id, error: String(e) }),
      )
      .finally(() => (this.reading = false));
  }

  private onRow(row: BatchRow | undefined): void {
    if (this.done) return;
    if (!row) return this.end();
    const key = changeKey(row);
    if (key !== this.lastKey) {
      this.lastKey = key;
      const wait = MIN_GAP_MS - (Date.now() - this.lastSentAt);
      if (isFinal(row.status) || wait <= 0) return this.emit(row);
      // Throttled: the row as it is when the gap has passed goes out then.
      this.pending ??= setTimeout(() => {
        this.pending = null;
        this.fetchRow().then(
          (now) => (now ? this.emit(now) : this.end()),
          (e) => this.ctx.log.error("batch events: read failed", { batch_id: this.id, error: String(e) }),
        );
      }, wait);
    }
    if (Date.now() - this.lastWriteAt >= this.ctx.config.sseKeepAliveMs - POLL_MS) this.write(KEEP_ALIVE);
  }

  private emit(row: BatchRow): void {
    if (this.done) return;
    this.lastKey = changeKey(row);
    const bytes = this.encode(row);
    // A throttled change can be undone before its turn (a status_details
    // set and cleared, an estimate moved and back): the record is then the
    // one sent last, and an event says a change.
    if (!isFinal(row.status) && Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).equals(this.last)) return;
    this.last = bytes;
    this.lastSentAt = Date.now();
    this.write(this.last);
    if (isFinal(row.status)) this.end();
  }

  private write(bytes: Uint8Array): void {
    this.lastWriteAt = Date.now();
    for (const s of this.sinks.keys()) {
      try {
        s.enqueue(bytes);
      } catch {
        this.remove(s);
      }
    }
  }

  /** A new watcher: it gets the last event first; `hold` ends its stream alone when its key is revoked. */
  add(sink: Sink, hold?: StreamHold): void {
    this.sinks.set(sink, null);
    sink.enqueue(this.last);
    const release =
      hold?.(() => {
        if (!this.sinks.has(sink)) return;
        // Closed without a last event: a client (the CLI's watch) takes every `data:` for a batch record.
        try {
          sink.close();
        } catch {}
        this.remove(sink);
      }) ?? null;
    if (this.sinks.has(sink)) this.sinks.set(sink, release);
    else release?.();
  }

  /** Closes every watcher's stream and stops reading. */
  end(): void {
    if (this.done) return;
    this.done = true;
    clearInterval(this.poll);
    if (this.pending) clearTimeout(this.pending);
    for (const [s, release] of this.sinks) {
      release?.();
      try {
        s.close();
      } catch {}
    }
    this.sinks.clear();
    this.onEmpty();
  }

  /** A watcher is gone (it left, or its stream was ended): the last one's going stops the reading. */
  remove(sink: Sink): void {
    if (!this.sinks.has(sink)) return;
    this.sinks.get(sink)?.();
    this.sinks.delete(sink);
    if (this.sinks.size === 0) this.end();
  }
}

const perServer = new WeakMap<AppContext, BatchEvents>();

/** The server's BatchEvents (one per AppContext: tests run several servers in one process). */
export const batchEventsOf = (ctx: AppContext): BatchEvents => {
  let e = perServer.get(ctx);
  if (!e) perServer.set(ctx, (e = new BatchEvents(ctx)));
  return e;
};

/** One per server: the batches that have watchers now. */
export class BatchEvents {
  private readonly watched = new Map<string, Watched>();

  constructor(private readonly ctx: AppContext) {}

  /** Watchers now, over all batches (for tests and metrics). */
  get watchers(): number {
    let n = 0;
    for (const w of this.watched.values()) n += w.sinks.size;
    return n;
  }

  /** The SSE response for `row` (already checked to be the caller's); `hold` registers it under the caller's key. */
  stream(row: BatchRow, hold?: StreamHold): Response {
    let sink: Sink | null = null;
    let watch: Watched | null = null;
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        sink = controller;
        if (isFinal(row.status)) {
          controller.enqueue(encoder.encode(`event: batch\ndata: ${JSON.stringify(batchView(row))}\n\n`));
          controller.close();
          return;
        }
        watch = this.watched.get(row.id) ?? null;
        if (!watch || watch.final) {
          const w: Watched = new Watched(this.ctx, row.id, row, () => {
            if (this.watched.get(row.id) === w) this.watched.delete(row.id);
          });
          this.watched.set(row.id, w);
          watch = w;
        }
        watch.add(controller, hold);
      },
      cancel: () => {
        if (watch && sink) watch.remove(sink);
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" } });
  }

  /** Shutdown: every stream ends. */
  close(): void {
    for (const w of [...this.watched.values()]) w.end();
  }
}

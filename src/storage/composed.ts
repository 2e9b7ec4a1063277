// Reading a composed blob (a file made of parts, in order) as one body.
//
// Bytes that lie in one part are that part's lazily read Blob, sliced: on
// the local disk Bun serves it natively (sendfile) with a Content-Length.
// Bytes that span parts are one ReadableStream that reads each part's slice
// in turn, pulled by the consumer (one chunk in memory at a time). Bun 1.4.5
// drops a Content-Length that a handler sets on a streamed body
// (oven-sh/bun#10507), so a download reads such a body before it answers
// (./sized.ts).
import type { BlobPart } from "./blobStore";
import type { LazyBlob } from "./bucket";
import { sliceOf } from "./diskBlob";

/** The pieces of `parts` that cover bytes [start, end): which part, and the byte range inside it. */
export function piecesOf(parts: readonly BlobPart[], start: number, end: number): { part: BlobPart; from: number; to: number }[] {
  const out: { part: BlobPart; from: number; to: number }[] = [];
  let at = 0;
  for (const part of parts) {
    const partStart = at;
    const partEnd = at + part.bytes;
    at = partEnd;
    if (partEnd <= start || part.bytes === 0) continue;
    if (partStart >= end) break;
    out.push({ part, from: Math.max(start, partStart) - partStart, to: Math.min(end, partEnd) - partStart });
  }
  return out;
}

/**
 * Bytes [start, end) of the parts in order. `open(part)` gives a part's
 * lazily read Blob. A part that turns out shorter than recorded makes the
 * stream fail (the client sees a broken body, never a silently short one).
 */
export function readParts<B extends LazyBlob>(parts: readonly BlobPart[], start: number, end: number, open: (part: BlobPart) => B): B | Blob | ReadableStream<Uint8Array> {
  const pieces = piecesOf(parts, start, end);
  if (pieces.length === 1) return sliceOf(open(pieces[0]!.part), pieces[0]!.from, pieces[0]!.to) as B;
  if (pieces.length === 0) return new Blob([]);
  let i = 0;
  let reader: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(reason?: unknown): Promise<void> } | null = null;
  let expected = 0;
  let got = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          if (!reader) {
            if (i >= pieces.length) return controller.close();
            const p = pieces[i++]!;
            expected = p.to - p.from;
            got = 0;
            reader = open(p.part).slice(p.from, p.to).stream().getReader();
          }
          const r = await reader!.read();
          if (r.done || !r.value) {
            reader = null;
            if (got !== expected) throw new Error(`a part of a composed file is shorter than recorded (${got} of ${expected} bytes)`);
            continue;
          }
          if (r.value.length === 0) continue;
          got += r.value.length;
          controller.enqueue(r.value);
          return;
        }
      },
      cancel(reason) {
        return reader?.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

// Splits a batch input file into shards: byte ranges that end on a newline.
// Only the bytes near each cut are read, so this costs milliseconds even for
// gigabytes. Shards are small enough that a crash loses little in-flight
// work and large enough that per-shard overhead (a DB row, two part files)
// stays negligible: 4 MB ≈ 14k chat lines. (On S3 each window read is a
// ranged GET, one per shard: 250 for a 1 GB file, one after another.)
import type { LazyBlob } from "../storage/bucket";

export const SHARD_BYTES = 4 << 20;

/** `file`: the input, lazily read (BlobStore.open). */
export async function shardBoundaries(file: LazyBlob, size: number, shardBytes = SHARD_BYTES): Promise<{ start: number; end: number }[]> {
  const cuts: number[] = [0];
  let pos = shardBytes;
  while (pos < size) {
    // Find the first newline at or after pos; the shard ends just past it.
    let at = pos;
    let cut = -1;
    while (at < size && cut === -1) {
      const window = new Uint8Array(await file.slice(at, Math.min(size, at + 65536)).arrayBuffer());
      const nl = window.indexOf(10);
      if (nl !== -1) cut = at + nl + 1;
      at += window.length;
    }
    if (cut === -1 || cut >= size) break;
    cuts.push(cut);
    pos = Math.max(cut, pos) + shardBytes;
  }
  cuts.push(size);
  const out: { start: number; end: number }[] = [];
  for (let i = 0; i + 1 < cuts.length; i++) if (cuts[i + 1]! > cuts[i]!) out.push({ start: cuts[i]!, end: cuts[i + 1]! });
  return out;
}

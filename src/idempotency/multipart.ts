// The digest of a multipart/form-data body for Idempotency-Key (./index.ts):
// its parts — each one's name, filename and the SHA-256 of its bytes, in
// order — not its framing, so that a client's retry, which frames the same
// parts with a new boundary, is the same request. Fed by the upload code as
// it reads the body (wrap each part's sink), and by a replay that reads a
// body only to compare it.
import type { PartInfo, PartSink } from "../files/multipart";
import type { BodyDigest } from "./index";

/** Wraps `sink` so that the part's bytes also go into `digest` (nothing when the digest is inactive). */
export function digestPart(digest: BodyDigest, info: PartInfo, sink: PartSink): PartSink {
  if (!digest.active) return sink;
  const h = new Bun.CryptoHasher("sha256");
  return {
    write(chunk) {
      h.update(chunk);
      return sink.write(chunk);
    },
    end() {
      digest.update(`${JSON.stringify([info.name, info.filename])}${h.digest("hex")}\n`);
      return sink.end();
    },
  };
}

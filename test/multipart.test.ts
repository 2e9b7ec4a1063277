// The streaming multipart reader must find every boundary wherever the
// network happens to cut the body: here the same body arrives in chunks of
// every size from 1 byte up, and with boundary-like bytes near the cuts.
import { describe, expect, test } from "bun:test";
import { readMultipart } from "../src/files/multipart";

const BOUNDARY = "----offpeakTestBoundary7MA4YWxk";

function body(fileBytes: string): string {
  return (
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n${fileBytes}\r\n` +
    `--${BOUNDARY}--\r\n`
  );
}

function chunked(text: string, size: number): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  let at = 0;
  return new ReadableStream({
    pull(c) {
      if (at >= bytes.length) return c.close();
      c.enqueue(bytes.slice(at, at + size));
      at += size;
    },
  });
}

async function parse(stream: ReadableStream<Uint8Array>) {
  const parts: Record<string, string> = {};
  await readMultipart(stream, BOUNDARY, (info) => {
    const chunks: Uint8Array[] = [];
    return {
      write: (c) => void chunks.push(c.slice()),
      end: () => void (parts[info.name] = Buffer.concat(chunks).toString("utf8")),
    };
  });
  return parts;
}

describe("readMultipart", () => {
  // Content that looks like the start of a delimiter (CR LF - -) but is not one.
  const file = `{"a":1}\r\n--${BOUNDARY.slice(0, 10)}x\r\n\r\n-\r\n--\r\n` + "z".repeat(300) + `\r\n-${BOUNDARY}\r\n--${BOUNDARY.slice(0, -1)}`;
  const text = body(file);

  test("every chunk size from 1 to the whole body gives the same parts", async () => {
    for (let size = 1; size <= text.length + 1; size++) {
      const parts = await parse(chunked(text, size));
      expect({ size, parts }).toEqual({ size, parts: { purpose: "batch", file } });
    }
  });
});

// Baseline for bench/upload.ts: a bare Bun.serve that streams each POST body
// (the whole multipart body, unparsed) to a file on disk chunk by chunk with
// synchronous writes, as offpeak's local store does, and answers 200
// {"bytes": N}; the caller removes the files. No framework, no auth, no
// multipart parsing, no validation: the floor for "HTTP upload to disk" with
// bounded memory in Bun.
//
// Usage: bun bench/baseline-upload-server.ts --port P --dir DIR
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";

const args = process.argv.slice(2);
const arg = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i === -1 ? undefined : args[i + 1];
};
const port = Number(arg("port") ?? 0);
const dir = arg("dir") ?? "/tmp/offpeak-baseline-upload";
mkdirSync(dir, { recursive: true });

let seq = 0;
const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  maxRequestBodySize: Number.MAX_SAFE_INTEGER,
  idleTimeout: 255,
  async fetch(req) {
    const url = new URL(req.url);
    if (url.pathname === "/healthz") return new Response("ok");
    if (req.method !== "POST" || !req.body) return new Response("not found", { status: 404 });
    const path = join(dir, `upload-${++seq}.bin`);
    const fd = openSync(path, "w", 0o600);
    let bytes = 0;
    try {
      for await (const chunk of req.body) {
        let off = 0;
        while (off < chunk.length) off += writeSync(fd, chunk, off, chunk.length - off);
        bytes += chunk.length;
      }
    } finally {
      closeSync(fd);
    }
    return Response.json({ bytes });
  },
});

process.stdout.write(`baseline upload server on http://127.0.0.1:${server.port}\n`);
process.on("SIGTERM", () => {
  server.stop(true);
  process.exit(0);
});

// A real S3-compatible server for the tests (s3rver 3.7.1, from npm), run as
// a child process by ./s3.ts: `bun test/helpers/s3rver-main.ts DIR BUCKET`.
// Prints `{"port":N}` on one line once it listens. s3rver's own bugs are
// worked around here, never in offpeak:
//
// - A listing longer than one page answers 500: its continuation tokens are
//   encrypted with the `des` cipher, which Bun (BoringSSL) and Node 20 lack.
//   Here `des` is replaced by AES-128-CBC with the key and IV doubled (the
//   token stays opaque; s3rver reads back what it wrote).
// - A suffix range `bytes=-N` is read as `bytes=0-N`: rewritten here to
//   `bytes=SIZE-N-` before s3rver sees it.
// - `bytes=0-0` (the first byte) answers the whole object (an end of 0 is
//   taken for "no end"): answered here.
// - AbortMultipartUpload (DELETE ?uploadId=) is not implemented (405):
//   answered here by removing the upload's parts, as S3 does.
// - Deleting a key's last object removes its now empty directories, racing
//   with a PUT of another key in the same directory (mkdir, then the
//   removal, then the open: ENOENT on a stream without an error listener
//   kills the server). Here the directories stay.
import crypto from "node:crypto";
import { rmSync } from "node:fs";
import { open, rm, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
// @ts-expect-error s3rver ships no types
import S3rver from "s3rver";

const [dir, bucket] = process.argv.slice(2);
if (!dir || !bucket) throw new Error("usage: s3rver-main.ts DIR BUCKET");

const double = (b: Buffer) => Buffer.concat([b, b]);
const { createCipheriv, createDecipheriv } = crypto;
const patched = crypto as unknown as Record<string, unknown>;
patched.createCipheriv = (alg: string, key: Buffer, iv: Buffer, ...rest: unknown[]) =>
  alg === "des" ? createCipheriv("aes-128-cbc", double(key), double(iv)) : (createCipheriv as any)(alg, key, iv, ...rest);
patched.createDecipheriv = (alg: string, key: Buffer, iv: Buffer, ...rest: unknown[]) =>
  alg === "des" ? createDecipheriv("aes-128-cbc", double(key), double(iv)) : (createDecipheriv as any)(alg, key, iv, ...rest);

const srv = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: dir, configureBuckets: [{ name: bucket }] });

srv.store.deleteObject = async (bucket: string, key: string) => {
  const paths = ["object", "object.md5", "metadata.json"].map((r) => srv.store.getResourcePath(bucket, key, r));
  await Promise.all(
    paths.map((p) =>
      unlink(p).catch((e) => {
        if (e.code !== "ENOENT") throw e;
      }),
    ),
  );
};

/** Path-style: /BUCKET/KEY… */
function target(path: string): { bucket: string; key: string } | null {
  const m = /^\/([^/]+)\/(.+)$/.exec(path);
  return m ? { bucket: decodeURIComponent(m[1]!), key: decodeURIComponent(m[2]!) } : null;
}

// Before s3rver's own middleware (Koa runs them in order).
srv.middleware.unshift(async (ctx: any, next: () => Promise<void>) => {
  const t = target(ctx.path);
  if (t && ctx.method === "DELETE" && "uploadId" in ctx.query) {
    const uploads = srv.store.getResourcePath(t.bucket, undefined, "uploads");
    const id = String(ctx.query.uploadId);
    if (!/^[0-9a-f]+$/.test(id)) return void (ctx.status = 400);
    await rm(join(uploads, id), { recursive: true, force: true });
    ctx.status = 204;
    return;
  }
  if (t && ctx.method === "GET" && /^bytes=0-0$/.test(ctx.headers.range ?? "")) {
    const path = srv.store.getResourcePath(t.bucket, t.key, "object");
    const size = await stat(path).then((s) => s.size, () => -1);
    if (size > 0) {
      const fh = await open(path, "r");
      const byte = Buffer.alloc(1);
      await fh.read(byte, 0, 1, 0).finally(() => fh.close());
      ctx.status = 206;
      ctx.set("Content-Range", `bytes 0-0/${size}`);
      ctx.set("Accept-Ranges", "bytes");
      ctx.body = byte;
      return;
    }
  }
  const range = /^bytes=-(\d+)$/.exec(ctx.headers.range ?? "");
  if (t && range && (ctx.method === "GET" || ctx.method === "HEAD")) {
    try {
      const size = (await stat(srv.store.getResourcePath(t.bucket, t.key, "object"))).size;
      ctx.headers.range = `bytes=${Math.max(0, size - Number(range[1]))}-`;
    } catch {}
  }
  await next();
});

const addr = await srv.run();
process.stdout.write(JSON.stringify({ port: addr.port }) + "\n");
// The bucket's directory goes with this process, however it ends (the test
// runner does not always run its own exit handlers).
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
process.on("SIGTERM", () => srv.close().finally(() => process.exit(0)));
// Never outlive the test process: stdin is a pipe from it (end of file when
// it dies, even by SIGKILL), and its pid is checked now and then too.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
const parent = process.ppid;
setInterval(() => {
  try {
    process.kill(parent, 0);
  } catch {
    process.exit(0);
  }
  if (process.ppid !== parent) process.exit(0);
}, 1000).unref();

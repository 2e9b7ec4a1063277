// A real S3-compatible server started by the tests themselves: s3rver from
// npm (a devDependency), in a child process on port 0 with a temp dir and one
// bucket (./s3rver-main.ts, which also works around s3rver's bugs). Servers
// under test get a prefix of their own in that bucket (s3Storage()).
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const S3_BUCKET = "offpeak-test";
/** s3rver's fixed credentials. */
const ACCESS_KEY = "S3RVER";

export interface TestS3 {
  endpoint: string;
  bucket: string;
  /** Its files: <dir>/<bucket>/… */
  dir: string;
  /** A client for the bucket, to look at what offpeak stored. */
  client: Bun.S3Client;
  /** The environment a server needs to reach the bucket (the names Bun's S3 client reads). */
  env: Record<string, string>;
  /** Keys under `prefix` (every page). */
  keys(prefix?: string): Promise<string[]>;
  /** Multipart uploads begun and neither completed nor aborted. */
  pendingUploads(): string[];
  stop(): Promise<void>;
}

/** Children still running: killed when the test process exits, whatever happened. */
const children = new Map<{ kill(signal?: number | NodeJS.Signals): void }, string>();
process.once("exit", () => {
  for (const [c, dir] of children) {
    c.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});

export async function startS3(): Promise<TestS3> {
  const dir = mkdtempSync(join(tmpdir(), "offpeak-s3-"));
  const proc = Bun.spawn([process.execPath, join(import.meta.dir, "s3rver-main.ts"), dir, S3_BUCKET], {
    cwd: join(import.meta.dir, "..", ".."),
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
    env: { ...process.env },
  });
  children.set(proc, dir);
  const reader = proc.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`s3rver exited before it listened (code ${await proc.exited})`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const { port } = JSON.parse(text.slice(0, text.indexOf("\n"))) as { port: number };
  const endpoint = `http://127.0.0.1:${port}`;
  const env = { S3_ENDPOINT: endpoint, S3_REGION: "us-east-1", S3_ACCESS_KEY_ID: ACCESS_KEY, S3_SECRET_ACCESS_KEY: ACCESS_KEY };
  const client = new Bun.S3Client({ endpoint, bucket: S3_BUCKET, region: "us-east-1", accessKeyId: ACCESS_KEY, secretAccessKey: ACCESS_KEY });
  let stopped = false;
  return {
    endpoint,
    bucket: S3_BUCKET,
    dir,
    client,
    env,
    async keys(prefix?: string) {
      const out: string[] = [];
      let token: string | undefined;
      do {
        const page = await client.list({ prefix, continuationToken: token });
        for (const c of page.contents ?? []) out.push(c.key);
        token = page.isTruncated ? page.nextContinuationToken : undefined;
      } while (token);
      return out.sort();
    },
    pendingUploads() {
      try {
        return readdirSync(join(dir, S3_BUCKET, "._S3rver_uploads"));
      } catch {
        return [];
      }
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      proc.kill("SIGTERM");
      await proc.exited;
      children.delete(proc);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let shared: Promise<TestS3> | null = null;

/** One s3rver for this test process, started on first use, stopped at exit. */
export function sharedS3(): Promise<TestS3> {
  shared ??= startS3();
  return shared;
}

/**
 * `--storage-url` and the environment for a server whose files go to a
 * prefix of the shared bucket: `name`'s (a data dir's name, so that a
 * restart on the same data dir finds its files), or a fresh one.
 */
export async function s3Storage(name?: string): Promise<{ url: string; prefix: string; env: Record<string, string>; s3: TestS3 }> {
  const s3 = await sharedS3();
  const prefix = name ? name.replace(/[^A-Za-z0-9_-]/g, "_") : `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  return { url: `s3://${s3.bucket}/${prefix}`, prefix, env: s3.env, s3 };
}

// A real offpeak server in a child process (`bun src/main.ts serve`), for
// tests that need signals (SIGKILL, SIGTERM), restarts on the same data dir,
// or several nodes on one database and bucket. Every child started here is
// killed when the test process exits, whatever happened.
import type { Subprocess } from "bun";
import { join, resolve } from "node:path";
import OpenAI from "openai";
import { pollUntil } from "./batches";
import { cleanEnv } from "./env";
import { ADMIN_KEY, SERVE_READY } from "./server";

const ROOT = resolve(import.meta.dir, "..", "..");
const MAIN = join(ROOT, "src", "main.ts");

const running = new Set<Subprocess>();
process.on("exit", () => {
  for (const p of running) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
});

/**
 * SIGKILLs every child started here that still runs, and waits for them to
 * exit: for a test file's afterAll. `bun test` (1.4) runs no process "exit"
 * hooks, so the hook above does not fire there and a child left running by a
 * failed test would outlive the run. Test files run one after another in a
 * process (each --parallel worker is a process of its own), so at a file's
 * afterAll the children still running are that file's (or leaks from before).
 */
export async function killChildren(): Promise<void> {
  const procs = [...running];
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
  await Promise.all(procs.map((p) => p.exited));
}

/** The test process's environment without offpeak's own settings, plus the admin key and `env`. */
export function childEnv(env: Record<string, string> = {}): Record<string, string> {
  return cleanEnv({ OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "warn", ...env });
}

export interface ChildOptions {
  dataDir: string;
  /** More `serve` flags (--config, --database-url, --storage-url …). */
  args?: string[];
  /** More environment (on top of childEnv()). */
  env?: Record<string, string>;
  /** How long to wait for the banner's "API base" line while the server prints nothing (default 20 s). */
  startMs?: number;
}

export class ChildServer {
  stdout = "";
  stderr = "";
  url = "";
  client!: OpenAI;
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;

  private constructor(readonly opts: ChildOptions) {
    this.proc = Bun.spawn([process.execPath, MAIN, "serve", "--port", "0", "--host", "127.0.0.1", "--data-dir", opts.dataDir, ...(opts.args ?? [])], {
      cwd: ROOT,
      env: childEnv(opts.env),
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    running.add(this.proc);
    void this.proc.exited.then(() => running.delete(this.proc));
    void collect(this.proc.stdout, (s) => (this.stdout += s));
    void collect(this.proc.stderr, (s) => (this.stderr += s));
  }

  /** Starts a server and waits until it listens. */
  static async start(opts: ChildOptions): Promise<ChildServer> {
    const c = ChildServer.launch(opts);
    await c.ready();
    return c;
  }

  /** Starts a server without waiting for it (read its output meanwhile; then ready()). */
  static launch(opts: ChildOptions): ChildServer {
    return new ChildServer(opts);
  }

  /** Waits until the server listens (see ChildOptions.startMs); fails if it exits first. */
  async ready(): Promise<void> {
    const m = await pollUntil(
      async () => {
        if (this.proc.exitCode !== null) throw new Error(`server exited with ${this.proc.exitCode}: ${this.stderr}`);
        return SERVE_READY.exec(this.stdout);
      },
      (m) => m !== null,
      this.opts.startMs ?? 20_000,
      25,
      "the server to listen",
      // Anything it prints (a migration, "waiting for the database") is progress: only silence counts.
      () => this.stdout.length + this.stderr.length,
    );
    this.url = m![1]!;
    this.client = new OpenAI({ apiKey: ADMIN_KEY, baseURL: `${this.url}/api/v1`, maxRetries: 0 });
  }

  /** Whether it has said it listens. */
  get listening(): boolean {
    return SERVE_READY.test(this.stdout);
  }

  get base(): string {
    return `${this.url}/api/v1`;
  }

  /** fetch against the API base with a bearer key (admin by default; null for none). */
  api(path: string, init: RequestInit & { key?: string | null } = {}): Promise<Response> {
    const { key = ADMIN_KEY, ...rest } = init;
    const headers = new Headers(rest.headers);
    if (key !== null) headers.set("authorization", `Bearer ${key}`);
    return fetch(this.base + path, { ...rest, headers });
  }

  /** Sends `signal`; resolves with the exit code, or null if the process still runs after `ms`. */
  async stop(signal: "SIGKILL" | "SIGTERM" = "SIGTERM", ms = 10_000): Promise<number | null> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
    return Promise.race([this.proc.exited, Bun.sleep(ms).then(() => null)]);
  }
}

async function collect(stream: ReadableStream<Uint8Array>, add: (s: string) => void) {
  const dec = new TextDecoder();
  for await (const chunk of stream) add(dec.decode(chunk, { stream: true }));
}

// What a hostile client costs the server (docs/CONTRACT.md §16): its RSS (VmRSS), peak
// RSS (VmHWM) and threads from /proc/PID/status before and after
//   - one 400 MB JSON POST to /v1/chat/completions, chunked;
//   - the same with a declared Content-Length of 400 MB;
//   - 60 uploads (15 keys × 4) that stall after their file part's headers
//     and a few lines: while they are held, once the idle timeout has ended
//     them (OFFPEAK_UPLOAD_IDLE_TIMEOUT_S=5 here), and after they hang up.
// Each attack gets a fresh server. With --baseline DIR the same runs go
// against the tree in DIR too (e.g. the last commit: `git archive HEAD |
// tar -x -C DIR` and a node_modules link), for a ratio to it.
//
// Usage: bun bench/hostile-memory.ts [--baseline DIR]
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, freePort, machineNote, procStatus, spawnBun, waitForHttp, type Child } from "./lib";

const ADMIN_KEY = "sk-op-benchHostileMemoryAdminKey000000000000";
const argv = process.argv.slice(2);
const baselineDir = argv.includes("--baseline") ? argv[argv.indexOf("--baseline") + 1] : undefined;
const BODY_BYTES = 400e6;
const STALLED = 60;
const IDLE_S = 5;

function status(pid: number): { rss: number; hwm: number; threads: number } {
  const st = procStatus(pid);
  return { rss: st.rssMb, hwm: st.peakRssMb, threads: st.threads };
}
const fmt = (st: { rss: number; hwm: number; threads: number }) => `RSS ${st.rss.toFixed(0)} MB, peak ${st.hwm.toFixed(0)} MB, ${st.threads} threads`;

/** A raw-socket client: writes its head, then body bytes when told; `answer` is the status line's code (0: closed without one). */
class Raw {
  readonly sock: Socket;
  readonly answer: Promise<number>;
  answered = false;
  sent = 0;
  constructor(port: number, head: string) {
    this.sock = connect(port, "127.0.0.1");
    this.sock.setNoDelay(true);
    this.sock.write(head);
    let text = "";
    this.answer = new Promise((resolve) => {
      this.sock.on("data", (d) => {
        text += d.toString("latin1");
        if (!this.answered && text.includes("\r\n")) {
          this.answered = true;
          resolve(Number(text.split(" ")[1]));
        }
      });
      this.sock.on("close", () => {
        this.answered = true;
        resolve(0);
      });
      this.sock.on("error", () => {});
    });
  }
  async send(data: Buffer): Promise<boolean> {
    if (this.sock.destroyed || this.answered) return false;
    this.sent += data.length;
    if (!this.sock.write(data))
      await new Promise<void>((r) => {
        const done = () => {
          this.sock.off("drain", done);
          this.sock.off("close", done);
          r();
        };
        this.sock.on("drain", done);
        this.sock.on("close", done);
      });
    return true;
  }
}

async function withServer<T>(root: string, env: Record<string, string>, fn: (port: number, child: Child) => Promise<T>): Promise<T> {
  const dataDir = mkdtempSync(join(tmpdir(), "offpeak-bench-hostile-"));
  const port = freePort();
  const child = spawnBun(["src/main.ts", "serve", "--port", String(port), "--data-dir", dataDir], {
    cwd: root,
    env: { OFFPEAK_ADMIN_KEY: ADMIN_KEY, OFFPEAK_LOG_LEVEL: "error", OFFPEAK_BATCH_WORKERS: "1", ...env },
  });
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, child.proc);
    child.assertRuns("src/main.ts");
    await Bun.sleep(500);
    return await fn(port, child);
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** One 400 MB JSON POST, chunked or with its length declared, sent until the server answers or hangs up. */
async function bigJson(root: string, chunked: boolean): Promise<string> {
  return withServer(root, {}, async (port, child) => {
    const before = status(child.pid);
    const framing = chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${BODY_BYTES}`;
    const c = new Raw(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`);
    const piece = Buffer.alloc(1 << 20, 0x61);
    const head = Buffer.from('{"model":"offpeak-echo","x":"');
    const frame = (b: Buffer) => (chunked ? Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from("\r\n")]) : b);
    const t0 = performance.now();
    await c.send(frame(head));
    while (c.sent < BODY_BYTES && (await c.send(frame(piece.subarray(0, Math.min(piece.length, BODY_BYTES - c.sent)))))) {}
    if (chunked) await c.send(Buffer.from("0\r\n\r\n"));
    const code = await Promise.race([c.answer, Bun.sleep(60_000).then(() => -1)]);
    const seconds = (performance.now() - t0) / 1000;
    c.sock.destroy();
    await Bun.sleep(300);
    const after = status(child.pid);
    return `answer ${code} after ${(c.sent / 1e6).toFixed(1)} MB sent, ${seconds.toFixed(2)} s; before: ${fmt(before)}; after: ${fmt(after)}`;
  });
}

/** 60 uploads that stall after their file part's headers and a few lines. */
async function stalledUploads(root: string): Promise<string[]> {
  return withServer(root, { OFFPEAK_UPLOAD_IDLE_TIMEOUT_S: String(IDLE_S) }, async (port, child) => {
    const keys: string[] = [];
    for (let i = 0; i < STALLED / 4; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ name: `k${i}` }),
      });
      keys.push(((await res.json()) as { key: string }).key);
    }
    const before = status(child.pid);
    const B = "----stall";
    const lines = Array.from({ length: 50 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "offpeak-echo", messages: [] } })).join("\n") + "\n";
    const clients: Raw[] = [];
    for (let i = 0; i < STALLED; i++) {
      const c = new Raw(
        port,
        `POST /api/v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${keys[i % keys.length]}\r\nContent-Type: multipart/form-data; boundary=${B}\r\nContent-Length: 100000000\r\n\r\n`,
      );
      void c.send(Buffer.from(`--${B}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${B}\r\nContent-Disposition: form-data; name="file"; filename="s.jsonl"\r\n\r\n${lines}`));
      clients.push(c);
    }
    const codes = new Map<number, number>();
    for (const c of clients) void c.answer.then((code) => codes.set(code, (codes.get(code) ?? 0) + 1));
    await Bun.sleep(2000);
    const held = status(child.pid);
    const summary = () => [...codes].map(([code, n]) => `${n}×${code || "closed"}`).join(", ") || "none";
    const heldLine = `held 2 s: ${fmt(held)}; answers so far: ${summary()}`;
    await Promise.race([Promise.all(clients.map((c) => c.answer)), Bun.sleep((IDLE_S + 3) * 1000)]);
    await Bun.sleep(500);
    const afterIdle = status(child.pid);
    const idleLine = `${IDLE_S + 3} s later: ${fmt(afterIdle)}; answers: ${summary()}`;
    for (const c of clients) c.sock.destroy();
    await Bun.sleep(1500);
    return [`before: ${fmt(before)}`, heldLine, idleLine, `clients gone: ${fmt(status(child.pid))}`];
  });
}

console.log(`hostile-memory: ${machineNote()}`);
const trees: [string, string][] = [["this tree", ROOT]];
if (baselineDir) trees.push([`baseline (${baselineDir})`, baselineDir]);
for (const [name, root] of trees) {
  console.log(`\n== ${name}`);
  console.log(`400 MB chunked JSON POST:  ${await bigJson(root, true)}`);
  console.log(`400 MB declared JSON POST: ${await bigJson(root, false)}`);
  const lines = await stalledUploads(root);
  console.log(`${STALLED} stalled uploads (15 keys × 4):\n  ${lines.join("\n  ")}`);
}

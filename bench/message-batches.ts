// Anthropic's Message Batches (docs/CONTRACT.md §22) against the same work as
// OpenAI batches, on offpeak-echo: N requests (--n, default 1,000,000) sent
// as message batches (POST /v1/messages/batches, at most 100,000 requests
// each, so N/100,000 of them), run, and their results read
// (GET …/results, every line parsed), against the same requests as as many
// OpenAI batches (upload the JSONL file, create, wait, read the output
// file, every line parsed). Each run starts a fresh server for each side,
// alternating which goes first; medians of --runs (default 3). Prints the
// seconds of each, the ratio (target ≤ 1.2×) and each side's peak RSS
// (target ≤ 256 MB); each run also says where its time went: per phase
// (create, run, results) the seconds, the server's CPU seconds (all
// threads, and its main thread alone) and the highest RSS sampled.
//
// Usage: bun bench/message-batches.ts [--n 1000000] [--runs 3]
import { benchArgs, cpuSeconds, machineNote, median, rssMb } from "./lib";
import { auth, startBenchServer, type BenchServer } from "./server";
import { pollUntil } from "../test/helpers/wait";

const args = benchArgs();
const n = Number(args.opt("n") ?? 1_000_000);
const runs = Number(args.opt("runs") ?? 3);
const PER_BATCH = 100_000;
if (!(n >= 1) || !(runs >= 1)) {
  console.error("usage: bun bench/message-batches.ts [--n 1000000] [--runs 3]");
  process.exit(2);
}
const groups = Math.ceil(n / PER_BATCH);
const sizes = Array.from({ length: groups }, (_, g) => Math.min(PER_BATCH, n - g * PER_BATCH));

/** Request i: a Messages request, which is also a chat completion request as it stands (the same body on both sides). */
const params = (i: number) => ({ model: "offpeak-echo", max_tokens: 16, messages: [{ role: "user", content: `request number ${i} of the benchmark, please echo` }] });

/** The body of one message batch: requests [from, from + size). */
function messageBody(from: number, size: number): string {
  const parts: string[] = [];
  for (let i = from; i < from + size; i++) parts.push(JSON.stringify({ custom_id: `r${i}`, params: params(i) }));
  return `{"requests":[${parts.join(",")}]}`;
}

/** The same requests as an OpenAI batch input file. */
function jsonl(from: number, size: number): string {
  let out = "";
  for (let i = from; i < from + size; i++) out += JSON.stringify({ custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: params(i) }) + "\n";
  return out;
}

/** Reads a JSON Lines answer as it streams, parsing each line; calls `each` with it. */
async function eachLine(res: Response, each: (v: { custom_id: string; [k: string]: unknown }) => void): Promise<void> {
  if (!res.ok || !res.body) throw new Error(`${res.url}: ${res.status} ${await res.text()}`);
  const decoder = new TextDecoder();
  let carry = "";
  for await (const chunk of res.body) {
    const text = carry + decoder.decode(chunk, { stream: true });
    const lines = text.split("\n");
    carry = lines.pop()!;
    for (const l of lines) if (l) each(JSON.parse(l));
  }
  if (carry) each(JSON.parse(carry));
}

const root = (s: BenchServer) => s.base.replace(/\/api\/v1$/, "");

/** Bodies made before the clock starts: the client's own work is not what is measured. */
const messageBodies = sizes.map((size, g) => messageBody(g * PER_BATCH, size));
const inputFiles = sizes.map((size, g) => jsonl(g * PER_BATCH, size));
console.log(`${n} requests as ${groups} batch(es) a side; bodies ${(messageBodies.reduce((a, b) => a + b.length, 0) / 1e6).toFixed(1)} MB (message) / ${(inputFiles.reduce((a, b) => a + b.length, 0) / 1e6).toFixed(1)} MB (JSONL)`);

/**
 * Where a side's time and memory go: seconds in each phase (create: every
 * batch made; run: waiting for each to end; results: reading them), the
 * server's CPU seconds in each (all threads / its main thread: less noisy
 * than the wall clock on a shared machine) and its highest RSS sampled.
 */
class Phases {
  readonly seconds = { create: 0, run: 0, results: 0 };
  readonly rss = { create: 0, run: 0, results: 0 };
  readonly cpu = { create: 0, run: 0, results: 0 };
  readonly mainCpu = { create: 0, run: 0, results: 0 };
  private cpuAt = 0;
  private mainAt = 0;
  private phase: keyof Phases["seconds"] = "create";
  private at = performance.now();
  private readonly timer: ReturnType<typeof setInterval>;
  constructor(private readonly pid: number) {
    this.cpuAt = cpuSeconds(pid);
    this.mainAt = cpuSeconds(pid, true);
    this.timer = setInterval(() => this.sample(), 50);
  }
  private sample(): void {
    try {
      this.rss[this.phase] = Math.max(this.rss[this.phase], rssMb(this.pid));
    } catch {}
  }
  to(phase: keyof Phases["seconds"]): void {
    this.sample();
    const now = performance.now();
    const cpu = cpuSeconds(this.pid);
    const main = cpuSeconds(this.pid, true);
    this.cpu[this.phase] += cpu - this.cpuAt;
    this.mainCpu[this.phase] += main - this.mainAt;
    this.cpuAt = cpu;
    this.mainAt = main;
    this.seconds[this.phase] += (now - this.at) / 1000;
    this.at = now;
    this.phase = phase;
    this.sample();
  }
  end(): string {
    this.to("create");
    clearInterval(this.timer);
    const k = ["create", "run", "results"] as const;
    return k.map((p) => `${p} ${this.seconds[p].toFixed(2)} s (CPU ${this.cpu[p].toFixed(1)} s, main ${this.mainCpu[p].toFixed(1)} s; ${this.rss[p].toFixed(0)} MB)`).join(", ");
  }
}

async function messageSide(s: BenchServer, ph: Phases): Promise<number> {
  const t0 = performance.now();
  const ids: string[] = [];
  for (const body of messageBodies) {
    const res = await fetch(`${root(s)}/v1/messages/batches`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body });
    if (!res.ok) throw new Error(`create: ${res.status} ${await res.text()}`);
    ids.push(((await res.json()) as { id: string }).id);
  }
  let ok = 0;
  for (const id of ids) {
    ph.to("run");
    await pollUntil(
      () => fetch(`${root(s)}/v1/messages/batches/${id}`, { headers: auth }).then((r) => r.json() as Promise<{ processing_status: string }>),
      (b) => b.processing_status === "ended",
      { stallMs: Infinity },
    );
    ph.to("results");
    await eachLine(await fetch(`${root(s)}/v1/messages/batches/${id}/results`, { headers: auth }), (l) => {
      if ((l.result as { type: string }).type === "succeeded") ok++;
    });
  }
  if (ok !== n) throw new Error(`message batches: ${ok} of ${n} succeeded`);
  return (performance.now() - t0) / 1000;
}

async function openaiSide(s: BenchServer, ph: Phases): Promise<number> {
  const t0 = performance.now();
  const ids: string[] = [];
  for (const text of inputFiles) {
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([text]), "input.jsonl");
    const file = (await fetch(`${s.base}/files`, { method: "POST", headers: auth, body: form }).then((r) => r.json())) as { id: string };
    const res = await fetch(`${s.base}/batches`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    });
    if (!res.ok) throw new Error(`create: ${res.status} ${await res.text()}`);
    ids.push(((await res.json()) as { id: string }).id);
  }
  let ok = 0;
  for (const id of ids) {
    ph.to("run");
    const b = await pollUntil(
      () => fetch(`${s.base}/batches/${id}`, { headers: auth }).then((r) => r.json() as Promise<{ status: string; output_file_id: string | null }>),
      (b) => ["completed", "failed", "expired", "cancelled"].includes(b.status),
      { stallMs: Infinity },
    );
    ph.to("results");
    await eachLine(await fetch(`${s.base}/files/${b.output_file_id}/content`, { headers: auth }), (l) => {
      if ((l.response as { status_code: number }).status_code === 200) ok++;
    });
  }
  if (ok !== n) throw new Error(`OpenAI batches: ${ok} of ${n} succeeded`);
  return (performance.now() - t0) / 1000;
}

const sides = { message: messageSide, openai: openaiSide } as const;
const seconds: Record<keyof typeof sides, number[]> = { message: [], openai: [] };
const rss: Record<keyof typeof sides, number[]> = { message: [], openai: [] };
for (let r = 0; r < runs; r++) {
  const order: (keyof typeof sides)[] = r % 2 === 0 ? ["message", "openai"] : ["openai", "message"];
  for (const side of order) {
    const server = await startBenchServer();
    try {
      const ph = new Phases(server.pid);
      const s = await sides[side](server, ph);
      const phases = ph.end();
      seconds[side].push(s);
      rss[side].push(server.peakRssMb());
      console.log(`run ${r + 1} ${side.padEnd(7)}: ${s.toFixed(2)} s, peak RSS ${server.peakRssMb().toFixed(0)} MB; ${phases}`);
    } finally {
      await server.stop();
    }
  }
}
const m = median(seconds.message);
const o = median(seconds.openai);
console.log(`machine : ${machineNote()}`);
console.log(`message batches: ${m.toFixed(2)} s (median of ${runs}; ${(n / m).toFixed(0)} requests/s)`);
console.log(`OpenAI batches : ${o.toFixed(2)} s (median of ${runs}; ${(n / o).toFixed(0)} requests/s)`);
console.log(`ratio   : ${(m / o).toFixed(2)}× (target ≤ 1.2×)`);
console.log(`peak RSS: message ${Math.max(...rss.message).toFixed(0)} MB, OpenAI ${Math.max(...rss.openai).toFixed(0)} MB (target ≤ 256 MB)`);

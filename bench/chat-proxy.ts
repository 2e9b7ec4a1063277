// Non-streaming chat completions through offpeak to a zero-latency loopback
// upstream (test/helpers/engineReplicas.ts, its own process), at 32 connections with wrk, beside a naive Bun.serve + fetch
// proxy measured the same way in the same run, and for reference the same
// proxy as an Elysia route that parses and re-serialises the body
// (bench/elysia-proxy.ts): what the framework costs before offpeak's own work.
// offpeak runs twice, side by side in the same rounds: with its default
// request log (one JSON line per request at info; its stderr is a pipe this
// script reads, as a log collector would, and every line is counted against
// wrk's requests) and with OFFPEAK_LOG_LEVEL=warn (no request lines).
// Needs wrk (Debian: apt-get install wrk).
// Usage: bun bench/chat-proxy.ts [seconds-per-run=5] [rounds=5]
import { writeFileSync } from "node:fs";
import { BENCH_KEY, freePort, startBenchServer } from "./server";
import { anyAnswer, cpuSeconds, engineArgs, waitForHttp } from "./lib";

const seconds = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 5);
if (!Bun.which("wrk")) {
  console.error("wrk not found: apt-get install wrk");
  process.exit(2);
}

const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
const lua = "/tmp/offpeak-wrk.lua";
writeFileSync(lua, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${BENCH_KEY}"\n`);

interface WrkResult {
  rps: number;
  requests: number;
  p50: number;
  p99: number;
  errors: number;
}

function medianOf(runs: WrkResult[]): WrkResult {
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return { rps: med(runs.map((r) => r.rps)), requests: med(runs.map((r) => r.requests)), p50: med(runs.map((r) => r.p50)), p99: med(runs.map((r) => r.p99)), errors: runs.reduce((a, r) => a + r.errors, 0) };
}

function ms(v: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v.trim());
  if (!m) return NaN;
  return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1);
}

async function wrk(url: string, connections = 32): Promise<WrkResult> {
  const p = Bun.spawn(["wrk", connections >= 2 ? "-t2" : "-t1", `-c${connections}`, `-d${seconds}s`, "--latency", "-s", lua, url], { stdout: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const sockErr = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    requests: Number(/(\d+) requests in/.exec(out)?.[1]),
    p50: ms(/\s50%\s+(\S+)/.exec(out)?.[1] ?? ""),
    p99: ms(/\s99%\s+(\S+)/.exec(out)?.[1] ?? ""),
    errors: non2xx + (sockErr ? sockErr.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
  };
}

const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, ...engineArgs({ ports: [upPort] })], { stdout: "ignore" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
const naivePort = await freePort();
const naive = Bun.spawn([process.execPath, "bench/naive-proxy.ts", String(naivePort), upBase], { stdout: "ignore" });
const elysiaPort = await freePort();
const elysia = Bun.spawn([process.execPath, "bench/elysia-proxy.ts", String(elysiaPort), upBase], { stdout: "ignore" });
let logged: Awaited<ReturnType<typeof startBenchServer>> | null = null;
let quiet: Awaited<ReturnType<typeof startBenchServer>> | null = null;

/** A wrk run with the server's CPU per request (µs): what it costs, which other load on the machine moves less than req/s. */
async function wrkCpu(url: string, pid: number, into: number[]): Promise<WrkResult> {
  const c0 = cpuSeconds(pid);
  const r = await wrk(url);
  into.push(((cpuSeconds(pid) - c0) * 1e6) / r.requests);
  return r;
}

/** Reads a server's stderr to the end, counting its lines (and bytes), as a log collector would. */
function countLines(stream: ReadableStream<Uint8Array>) {
  const counter = { lines: 0, bytes: 0, last: "" };
  void (async () => {
    for await (const chunk of stream) {
      counter.bytes += chunk.length;
      let i = -1;
      while ((i = chunk.indexOf(10, i + 1)) !== -1) counter.lines++;
      counter.last = new TextDecoder().decode(chunk.subarray(Math.max(0, chunk.length - 400)));
    }
  })();
  return counter;
}

try {
  await waitForHttp(`${upBase}/models`, undefined, 10_000, anyAnswer);
  await waitForHttp(`http://127.0.0.1:${naivePort}/`, undefined, 10_000, anyAnswer);
  await waitForHttp(`http://127.0.0.1:${elysiaPort}/`, undefined, 10_000, anyAnswer);
  const config = { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] };
  // The default log level (info): one request line per request.
  logged = await startBenchServer({ OFFPEAK_LOG_LEVEL: "info" }, config, { stderr: "pipe" });
  const log = countLines(logged.stderr!);
  quiet = await startBenchServer({ OFFPEAK_LOG_LEVEL: "warn" }, config);
  const loggedUrl = `${logged.base}/chat/completions`;
  const quietUrl = `${quiet.base}/chat/completions`;
  const naiveUrl = `http://127.0.0.1:${naivePort}/v1/chat/completions`;
  const elysiaUrl = `http://127.0.0.1:${elysiaPort}/v1/chat/completions`;
  // Warm every server up, then alternate rounds (this machine is noisy: one
  // pair of runs can differ by 40%); each figure is the median over the rounds.
  await wrk(naiveUrl);
  await wrk(elysiaUrl);
  await wrk(loggedUrl);
  await wrk(quietUrl);
  const bases: WrkResult[] = [];
  const refs: WrkResult[] = [];
  const onRuns: WrkResult[] = [];
  const offRuns: WrkResult[] = [];
  /** Request lines written minus requests wrk counted, per logged run (≥ 0: wrk does not count the answers in flight when it stops). */
  const missing: number[] = [];
  const cpuNaive: number[] = [];
  const cpuOn: number[] = [];
  const cpuOff: number[] = [];
  const loggedRun = async () => {
    const before = log.lines;
    const r = await wrkCpu(loggedUrl, logged!.pid, cpuOn);
    await Bun.sleep(100); // the last buffered lines (flushed within 10 ms)
    missing.push(r.requests - (log.lines - before));
    onRuns.push(r);
  };
  const runs = [
    () => wrkCpu(naiveUrl, naive.pid, cpuNaive).then((r) => bases.push(r)),
    () => wrk(elysiaUrl).then((r) => refs.push(r)),
    loggedRun,
    () => wrkCpu(quietUrl, quiet!.pid, cpuOff).then((r) => offRuns.push(r)),
  ];
  const fmt = (r: WrkResult) => `${Math.round(r.rps)} req/s (p99 ${r.p99.toFixed(2)} ms)`;
  for (let round = 0; round < ROUNDS; round++) {
    // Rotate the order so no server always runs first (or last) in a round.
    for (let k = 0; k < runs.length; k++) await runs[(round + k) % runs.length]!();
    const b = bases.at(-1)!;
    const on = onRuns.at(-1)!;
    const off = offRuns.at(-1)!;
    console.log(
      `  round ${round + 1}: naive ${fmt(b)}, elysia ${fmt(refs.at(-1)!)}, offpeak logs on ${fmt(on)} = ${(on.rps / b.rps).toFixed(2)}× (p99 ${(on.p99 / b.p99).toFixed(2)}×), logs off ${fmt(off)} = ${(off.rps / b.rps).toFixed(2)}× (p99 ${(off.p99 / b.p99).toFixed(2)}×); request lines short of wrk's count: ${missing.at(-1)}`,
    );
  }
  const base = medianOf(bases);
  const ref = medianOf(refs);
  const on = medianOf(onRuns);
  const off = medianOf(offRuns);
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const roundRatio = (runs: WrkResult[], f: (r: WrkResult, b: WrkResult) => number) => med(runs.map((r, i) => f(r, bases[i]!)));
  const line = (name: string, r: WrkResult) =>
    `${name}: ${Math.round(r.rps)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  errors ${r.errors}`;
  console.log(`medians over ${ROUNDS} rounds of ${seconds} s, 32 connections:`);
  console.log(line("naive proxy      ", base));
  console.log(`${line("elysia ref       ", ref)}  (${(ref.rps / base.rps).toFixed(2)}× naive)`);
  for (const [name, r, runs] of [["offpeak, logs on ", on, onRuns], ["offpeak, logs off", off, offRuns]] as const)
    console.log(
      `${line(name, r)}  = ${(r.rps / base.rps).toFixed(2)}× naive (median of per-round ratios ${roundRatio(runs, (x, b) => x.rps / b.rps).toFixed(2)}×), p99 ${(r.p99 / base.p99).toFixed(2)}× naive's (per round ${roundRatio(runs, (x, b) => x.p99 / b.p99).toFixed(2)}×)`,
    );
  console.log(`server CPU per request (all threads, median): naive ${med(cpuNaive).toFixed(1)} µs, offpeak logs on ${med(cpuOn).toFixed(1)} µs, logs off ${med(cpuOff).toFixed(1)} µs`);
  console.log(`targets, logs on: ≥ 0.85× the naive proxy, p99 ≤ 1.5× its p99, 0 errors`);
  console.log(`request log: ${log.lines} lines, ${(log.bytes / 1e6).toFixed(1)} MB over the run; per logged run, wrk's requests minus lines written: ${missing.join(", ")} (≤ 0: none lost)`);
  // At saturation every connection waits its turn (Little's law: latency ≈
  // connections / throughput), so the tail at 32 connections says more about
  // the machine than about the proxy; at 4 connections it shows our own cost.
  const lightOn = await wrk(loggedUrl, 4);
  const lightOff = await wrk(quietUrl, 4);
  const lightBase = await wrk(naiveUrl, 4);
  const light = (r: WrkResult) => `p50 ${r.p50.toFixed(2)} ms p99 ${r.p99.toFixed(2)} ms (${Math.round(r.rps)} req/s, errors ${r.errors})`;
  console.log(`at 4 connections: naive ${light(lightBase)}; offpeak logs on ${light(lightOn)}; logs off ${light(lightOff)}`);
  console.log(`peak RSS   : logs on ${logged.peakRssMb().toFixed(0)} MB, logs off ${quiet.peakRssMb().toFixed(0)} MB`);
} finally {
  await logged?.stop();
  await quiet?.stop();
  naive.kill();
  elysia.kill();
  upstream.kill();
}

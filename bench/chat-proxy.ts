// Non-streaming chat completions through offpeak to a zero-latency loopback
// upstream, at 32 connections with wrk, beside a naive Bun.serve + fetch
// proxy measured the same way in the same run, and for reference the same
// proxy as an Elysia route that parses and re-serialises the body
// (bench/elysia-proxy.ts): what the framework costs before offpeak's own work. Needs wrk (Debian: apt-get
// install wrk). Usage: bun bench/chat-proxy.ts [seconds-per-run=5] [rounds=5]
import { writeFileSync } from "node:fs";
import { BENCH_KEY, freePort, startBenchServer } from "./server";

const seconds = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 5);
if (!Bun.which("wrk")) {
  console.error("wrk not found: apt-get install wrk");
  process.exit(2);
}

async function waitFor(url: string, headers: Record<string, string> = {}) {
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(url, { headers }); // any answer means it is listening
      return;
    } catch {}
    await Bun.sleep(50);
  }
  throw new Error(`${url} did not come up`);
}

const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
const lua = "/tmp/offpeak-wrk.lua";
writeFileSync(lua, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${BENCH_KEY}"\n`);

interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

function medianOf(runs: WrkResult[]): WrkResult {
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return { rps: med(runs.map((r) => r.rps)), p50: med(runs.map((r) => r.p50)), p99: med(runs.map((r) => r.p99)), errors: runs.reduce((a, r) => a + r.errors, 0) };
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
    p50: ms(/\s50%\s+(\S+)/.exec(out)?.[1] ?? ""),
    p99: ms(/\s99%\s+(\S+)/.exec(out)?.[1] ?? ""),
    errors: non2xx + (sockErr ? sockErr.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
  };
}

const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, "bench/fake-upstream.ts", String(upPort)], { stdout: "ignore" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
const naivePort = await freePort();
const naive = Bun.spawn([process.execPath, "bench/naive-proxy.ts", String(naivePort), upBase], { stdout: "ignore" });
const elysiaPort = await freePort();
const elysia = Bun.spawn([process.execPath, "bench/elysia-proxy.ts", String(elysiaPort), upBase], { stdout: "ignore" });
let server: Awaited<ReturnType<typeof startBenchServer>> | null = null;
try {
  await waitFor(`${upBase}/models`);
  await waitFor(`http://127.0.0.1:${naivePort}/`);
  await waitFor(`http://127.0.0.1:${elysiaPort}/`);
  server = await startBenchServer({}, { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] });
  const url = `${server.base}/chat/completions`;
  const naiveUrl = `http://127.0.0.1:${naivePort}/v1/chat/completions`;
  const elysiaUrl = `http://127.0.0.1:${elysiaPort}/v1/chat/completions`;
  // Warm both up, then alternate rounds (this machine is noisy: one pair of
  // runs can differ by 40%); each figure is the median over the rounds.
  await wrk(naiveUrl);
  await wrk(elysiaUrl);
  await wrk(url);
  const bases: WrkResult[] = [];
  const refs: WrkResult[] = [];
  const ourRuns: WrkResult[] = [];
  const runs = [() => wrk(naiveUrl).then((r) => bases.push(r)), () => wrk(elysiaUrl).then((r) => refs.push(r)), () => wrk(url).then((r) => ourRuns.push(r))];
  for (let round = 0; round < ROUNDS; round++) {
    // Rotate the order so no server always runs first (or last) in a round.
    for (let k = 0; k < runs.length; k++) await runs[(round + k) % runs.length]!();
    console.log(
      `  round ${round + 1}: naive ${Math.round(bases.at(-1)!.rps)} req/s (p99 ${bases.at(-1)!.p99.toFixed(2)} ms), elysia ${Math.round(refs.at(-1)!.rps)} req/s (p99 ${refs.at(-1)!.p99.toFixed(2)} ms), offpeak ${Math.round(ourRuns.at(-1)!.rps)} req/s (p99 ${ourRuns.at(-1)!.p99.toFixed(2)} ms)`,
    );
  }
  const base = medianOf(bases);
  const ref = medianOf(refs);
  const ours = medianOf(ourRuns);
  console.log(`medians over ${ROUNDS} rounds of ${seconds} s, 32 connections:`);
  console.log(`naive proxy: ${Math.round(base.rps)} req/s  p50 ${base.p50.toFixed(2)} ms  p99 ${base.p99.toFixed(2)} ms  errors ${base.errors}`);
  console.log(`elysia ref : ${Math.round(ref.rps)} req/s  p50 ${ref.p50.toFixed(2)} ms  p99 ${ref.p99.toFixed(2)} ms  errors ${ref.errors}  (${(ref.rps / base.rps).toFixed(2)}× naive)`);
  console.log(`offpeak    : ${Math.round(ours.rps)} req/s  p50 ${ours.p50.toFixed(2)} ms  p99 ${ours.p99.toFixed(2)} ms  errors ${ours.errors}`);
  console.log(`ratio      : ${(ours.rps / base.rps).toFixed(2)}× the naive proxy (target ≥ 0.7×, p99 ≤ 3 ms, 0 errors)`);
  // At saturation every connection waits its turn (Little's law: latency ≈
  // connections / throughput), so the tail at 32 connections says more about
  // the machine than about the proxy; at 4 connections it shows our own cost.
  const light = await wrk(url, 4);
  const lightBase = await wrk(naiveUrl, 4);
  console.log(`at 4 connections: naive p50 ${lightBase.p50.toFixed(2)} ms p99 ${lightBase.p99.toFixed(2)} ms; offpeak p50 ${light.p50.toFixed(2)} ms p99 ${light.p99.toFixed(2)} ms (${Math.round(light.rps)} req/s, errors ${light.errors})`);
  console.log(`peak RSS   : ${server.peakRssMb().toFixed(0)} MB`);
} finally {
  await server?.stop();
  naive.kill();
  elysia.kill();
  upstream.kill();
}

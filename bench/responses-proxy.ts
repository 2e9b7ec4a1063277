// Non-streaming POST /responses through offpeak to a zero-latency loopback
// upstream (test/helpers/engineReplicas.ts, its own process), at 32 connections with wrk, beside the
// naive Bun.serve + fetch proxy (bench/naive-proxy.ts) doing the same, and
// the same pair for /chat/completions, all in the same rounds (rotated so
// none always goes first): each endpoint's ratio to its own naive proxy.
// offpeak runs twice, side by side: with its default request log (info; its
// stderr is a pipe this script drains, as a log collector would) and with
// OFFPEAK_LOG_LEVEL=warn (no request lines), as bench/chat-proxy.ts does. Throughput on this shared
// machine swings by ±30% between runs of the same server, so each run also
// reports the serving process's CPU time per request (utime + stime from
// /proc, over wrk's requests): a steadier measure of what a request costs.
// Needs wrk.
// Usage: bun bench/responses-proxy.ts [seconds-per-run=5] [rounds=5]
import { writeFileSync } from "node:fs";
import { cpuSeconds, engineArgs, freePort, median, waitForHttp, which } from "./lib";
import { BENCH_KEY, startBenchServer } from "./server";

const seconds = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 5);
if (!which("wrk")) {
  console.error("wrk not found: apt-get install wrk");
  process.exit(2);
}

const bodies = {
  chat: { model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 },
  responses: { model: "fake-model", input: "Say hello to the benchmark.", max_output_tokens: 16 },
};
const script = (kind: keyof typeof bodies, auth: boolean) => {
  const path = `/tmp/offpeak-wrk-${kind}${auth ? "" : "-naive"}.lua`;
  writeFileSync(
    path,
    `wrk.method = "POST"\nwrk.body = ${JSON.stringify(JSON.stringify(bodies[kind]))}\nwrk.headers["content-type"] = "application/json"\n` +
      (auth ? `wrk.headers["authorization"] = "Bearer ${BENCH_KEY}"\n` : ""),
  );
  return path;
};

interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU time of the serving process per request, µs. */
  cpuUs: number;
}

/** utime + stime of a process, in ms. */
const cpuMs = (pid: number) => cpuSeconds(pid) * 1000;

const ms = (v: string) => {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v.trim());
  return m ? Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1) : NaN;
};

async function wrk(url: string, lua: string, pid: number, connections = 32): Promise<WrkResult> {
  const cpu0 = cpuMs(pid);
  const p = Bun.spawn(["wrk", "-t2", `-c${connections}`, `-d${seconds}s`, "--latency", "-s", lua, url], { stdout: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const cpu = cpuMs(pid) - cpu0;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    p50: ms(/\s50%\s+(\S+)/.exec(out)?.[1] ?? ""),
    p99: ms(/\s99%\s+(\S+)/.exec(out)?.[1] ?? ""),
    errors: non2xx + (sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
    cpuUs: (cpu * 1000) / Number(/(\d+) requests in/.exec(out)?.[1]),
  };
}

const upPort = freePort();
const upstream = Bun.spawn([process.execPath, ...engineArgs({ ports: [upPort] })], { stdout: "ignore" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
const naive = {
  chat: { port: freePort(), path: "/chat/completions" },
  responses: { port: freePort(), path: "/responses" },
};
const naiveProcs = Object.values(naive).map((n) => Bun.spawn([process.execPath, "bench/naive-proxy.ts", String(n.port), upBase, n.path], { stdout: "ignore" }));
const naivePid = { chat: naiveProcs[0]!.pid, responses: naiveProcs[1]!.pid };
let server: Awaited<ReturnType<typeof startBenchServer>> | null = null;
let quiet: Awaited<ReturnType<typeof startBenchServer>> | null = null;

try {
  await waitForHttp(`${upBase}/models`);
  for (const n of Object.values(naive)) {
    // Any answer (its GET is proxied as a POST) means it listens.
    for (let i = 0; i < 200; i++) {
      try {
        await fetch(`http://127.0.0.1:${n.port}/`);
        break;
      } catch {
        await Bun.sleep(50);
      }
    }
  }
  const config = { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] };
  server = await startBenchServer({ OFFPEAK_LOG_LEVEL: "info" }, config, { stderr: "pipe" });
  quiet = await startBenchServer({ OFFPEAK_LOG_LEVEL: "warn" }, config);
  void (async () => {
    for await (const _ of server!.stderr!) {
      // drained, as a log collector would
    }
  })();
  const targets = (["chat", "responses"] as const).flatMap((kind) => [
    { kind, who: "naive", url: `http://127.0.0.1:${naive[kind].port}/v1${naive[kind].path}`, lua: script(kind, false), pid: naivePid[kind] },
    { kind, who: "offpeak", url: `${server!.base}${naive[kind].path}`, lua: script(kind, true), pid: server!.pid },
    { kind, who: "quiet", url: `${quiet!.base}${naive[kind].path}`, lua: script(kind, true), pid: quiet!.pid },
  ]);
  // Each answer checked once by hand: offpeak's /responses is the upstream's object.
  const check = await fetch(targets[4]!.url, { method: "POST", headers: { authorization: `Bearer ${BENCH_KEY}`, "content-type": "application/json" }, body: JSON.stringify(bodies.responses) });
  const answer = (await check.json()) as { object?: string; output?: { content: { text: string }[] }[] };
  if (check.status !== 200 || answer.object !== "response" || answer.output?.[0]?.content[0]?.text !== bodies.responses.input) throw new Error(`unexpected /responses answer: ${JSON.stringify(answer)}`);
  for (const x of targets) await wrk(x.url, x.lua, x.pid); // warm-up
  const runs = new Map<string, WrkResult[]>(targets.map((x) => [`${x.kind}/${x.who}`, []]));
  const fmt = (r: WrkResult) => `${Math.round(r.rps)} req/s (p99 ${r.p99.toFixed(2)} ms, ${r.cpuUs.toFixed(0)} µs CPU)`;
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < targets.length; k++) {
      const x = targets[(round + k) % targets.length]!;
      runs.get(`${x.kind}/${x.who}`)!.push(await wrk(x.url, x.lua, x.pid));
    }
    const last = (key: string) => runs.get(key)!.at(-1)!;
    console.log(
      `  round ${round + 1}: ` +
        (["chat", "responses"] as const)
          .map(
            (k) =>
              `${k}: naive ${fmt(last(`${k}/naive`))}, offpeak logs on ${fmt(last(`${k}/offpeak`))} = ${(last(`${k}/offpeak`).rps / last(`${k}/naive`).rps).toFixed(2)}×, ` +
              `logs off ${fmt(last(`${k}/quiet`))} = ${(last(`${k}/quiet`).rps / last(`${k}/naive`).rps).toFixed(2)}×`,
          )
          .join("; "),
    );
  }
  console.log(`medians over ${ROUNDS} rounds of ${seconds} s, 32 connections:`);
  const line = (r: WrkResult[]) =>
      `${Math.round(median(r.map((x) => x.rps)))} req/s p50 ${median(r.map((x) => x.p50)).toFixed(2)} ms p99 ${median(r.map((x) => x.p99)).toFixed(2)} ms errors ${r.reduce((a, x) => a + x.errors, 0)}, CPU ${median(r.map((x) => x.cpuUs)).toFixed(0)} µs/request`;
  for (const kind of ["chat", "responses"] as const) {
    const n = runs.get(`${kind}/naive`)!;
    console.log(`${kind.padEnd(9)} naive           : ${line(n)}`);
    for (const [who, name] of [
      ["offpeak", "offpeak, logs on "],
      ["quiet", "offpeak, logs off"],
    ] as const) {
      const o = runs.get(`${kind}/${who}`)!;
      const perRound = median(o.map((r, i) => r.rps / n[i]!.rps));
      console.log(`${kind.padEnd(9)} ${name}: ${line(o)} = ${(median(o.map((x) => x.rps)) / median(n.map((x) => x.rps))).toFixed(2)}× naive (median of per-round ratios ${perRound.toFixed(2)}×)`);
    }
  }
  const cpu = (key: string) => median(runs.get(key)!.map((x) => x.cpuUs));
  console.log(
    `CPU per request, offpeak /responses vs /chat/completions: logs on ${(cpu("responses/offpeak") / cpu("chat/offpeak")).toFixed(2)}×, logs off ${(cpu("responses/quiet") / cpu("chat/quiet")).toFixed(2)}×`,
  );
  console.log("target: /responses ≥ 0.8× its naive proxy, 0 errors");
  console.log(`peak RSS: logs on ${server.peakRssMb().toFixed(0)} MB, logs off ${quiet.peakRssMb().toFixed(0)} MB`);
} finally {
  await server?.stop();
  await quiet?.stop();
  for (const p of naiveProcs) p.kill();
  upstream.kill();
}

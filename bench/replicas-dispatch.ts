// What the dispatch among replicas costs on the chat pass-through
// (docs/CONTRACT.md §21: it must stay within the §20 figures): non-streamed
// chat completions at 32 connections with wrk to offpeak with one upstream
// of (a) one replica and (b) four replicas, on four ports of the same
// zero-latency engine (test/helpers/engineReplicas.ts at a fixed latency of
// 0, a process a port, so the engines' cost is the same in both), beside the naive Bun.serve + fetch proxy
// (bench/naive-proxy.ts) as the baseline of §20, and the same naive proxy
// sending each request to the next of the four in turn (what spreading over
// four engines costs by itself). Prompts carry a system
// prompt of one of 40 kinds (the prefix key hashes its first 1,024
// characters). Rounds alternate; figures are medians; CPU per request is
// the offpeak process's user + system time over wrk's requests.
// Needs wrk (Debian: apt-get install wrk).
// Usage: bun bench/replicas-dispatch.ts [seconds-per-run=5] [rounds=5]
import { writeFileSync } from "node:fs";
import { BENCH_KEY, freePort, startBenchServer } from "./server";
import { anyAnswer, cpuSeconds, engineArgs, waitForHttp } from "./lib";

const seconds = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 5);
if (!Bun.which("wrk")) {
  console.error("wrk not found: apt-get install wrk");
  process.exit(2);
}

const lua = "/tmp/offpeak-wrk-replicas.lua";
// 40 system prompts of ≈1,200 characters, chosen per request.
writeFileSync(
  lua,
  `local prompts = {}
for k = 1, 40 do prompts[k] = "You are assistant " .. k .. ". " .. string.rep("Answer briefly and truthfully. ", 40) end
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer ${BENCH_KEY}"
request = function()
  local k = math.random(1, 40)
  local body = '{"model":"fake-model","max_tokens":16,"messages":[{"role":"system","content":"' .. prompts[k] .. '"},{"role":"user","content":"Say hello ' .. math.random(1, 1000000) .. '"}]}'
  return wrk.format(nil, nil, nil, body)
end
`,
);

interface Run {
  rps: number;
  requests: number;
  errors: number;
}

async function wrk(url: string): Promise<Run> {
  const p = Bun.spawn(["wrk", "-t2", "-c32", `-d${seconds}s`, "-s", lua, url], { stdout: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]), requests: Number(/(\d+) requests in/.exec(out)?.[1]), errors: non2xx };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ports = await Promise.all([0, 1, 2, 3].map(() => freePort()));
const engines = ports.map((p) => Bun.spawn([process.execPath, ...engineArgs({ ports: [p] })], { stdout: "ignore" }));
const bases = ports.map((p) => `http://127.0.0.1:${p}/v1`);
const naivePort = await freePort();
const naive = Bun.spawn([process.execPath, "bench/naive-proxy.ts", String(naivePort), bases[0]!], { stdout: "ignore" });
// The same naive proxy sending each request to the next of the four engines in turn: what spreading alone costs.
const naive4Port = await freePort();
const naive4 = Bun.spawn([process.execPath, "bench/naive-proxy.ts", String(naive4Port), bases.join(",")], { stdout: "ignore" });
const servers: Awaited<ReturnType<typeof startBenchServer>>[] = [];
try {
  for (const b of bases) await waitForHttp(`${b}/models`, undefined, 10_000, anyAnswer);
  await waitForHttp(`http://127.0.0.1:${naivePort}/`, undefined, 10_000, anyAnswer);
  await waitForHttp(`http://127.0.0.1:${naive4Port}/`, undefined, 10_000, anyAnswer);
  const upstream = (replicas: string[]) => ({ upstreams: [{ name: "fake", engine: "openai", models: ["fake-model"], max_concurrency: 256, queue_size: 1024, replicas: replicas.map((base_url) => ({ base_url })) }] });
  const one = await startBenchServer({}, upstream(bases.slice(0, 1)));
  const four = await startBenchServer({}, upstream(bases));
  servers.push(one, four);
  const variants = [
    { name: "naive proxy", url: `http://127.0.0.1:${naivePort}/v1/chat/completions`, pid: naive.pid },
    { name: "offpeak, 1 replica", url: `${one.base}/chat/completions`, pid: one.pid },
    { name: "offpeak, 4 replicas", url: `${four.base}/chat/completions`, pid: four.pid },
    { name: "naive, 4 in turn", url: `http://127.0.0.1:${naive4Port}/v1/chat/completions`, pid: naive4.pid },
  ];
  for (const v of variants) await wrk(v.url);
  const rps = new Map<string, number[]>(variants.map((v) => [v.name, []]));
  const cpu = new Map<string, number[]>(variants.map((v) => [v.name, []]));
  let errors = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const order = [...variants.slice(round % variants.length), ...variants.slice(0, round % variants.length)];
    for (const v of order) {
      const c0 = cpuSeconds(v.pid);
      const r = await wrk(v.url);
      rps.get(v.name)!.push(r.rps);
      cpu.get(v.name)!.push(((cpuSeconds(v.pid) - c0) * 1e6) / r.requests);
      errors += r.errors;
    }
  }
  const naiveRps = median(rps.get("naive proxy")!);
  const naive4Rps = median(rps.get("naive, 4 in turn")!);
  const oneCpu = median(cpu.get("offpeak, 1 replica")!);
  console.log(`chat pass-through, 32 connections, ${seconds} s a run, ${ROUNDS} rounds alternating, medians; non-2xx: ${errors}`);
  for (const v of variants) {
    const r = median(rps.get(v.name)!);
    const c = median(cpu.get(v.name)!);
    console.log(`  ${v.name.padEnd(22)} ${r.toFixed(0).padStart(6)} req/s  ${(r / naiveRps).toFixed(3)}× the naive proxy  CPU ${c.toFixed(0)} µs a request${v.name.startsWith("offpeak") ? ` (${(c / oneCpu).toFixed(3)}× 1 replica)` : ""}`);
  }
  console.log(`  offpeak, 4 replicas against the naive proxy sending to the four in turn: ${(median(rps.get("offpeak, 4 replicas")!) / naive4Rps).toFixed(3)}×`);
  console.log(`  peak RSS: 1 replica ${one.peakRssMb().toFixed(0)} MB, 4 replicas ${four.peakRssMb().toFixed(0)} MB`);
} finally {
  for (const s of servers) await s.stop();
  naive.kill();
  naive4.kill();
  for (const e of engines) e.kill();
}

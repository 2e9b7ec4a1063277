// Chat pass-through A/B: offpeak servers from any trees (and log levels)
// side by side, alternating wrk runs in rotating order, with each server's
// CPU per request (all threads, /proc/PID/stat: in all and in the kernel;
// the main thread's alone, with the share of a core it was busy; and the
// busiest thread's, whose inverse bounds the request rate on a machine with
// cores to spare: docs/CONTRACT.md §20's many-core question, asked on 2 cores) and
// peak RSS. For changes
// too small for bench/chat-proxy.ts's medians to show on a noisy machine.
// Needs wrk.
//
//   bun bench/ab/proxy-ab.ts ROUNDS SECONDS SERVER...
//   SERVER: naive | TREE:LEVEL[:pipe|null][:NAME=VALUE,...]
//           (TREE: a checkout with node_modules; LEVEL: info or warn;
//           "null" sends stderr to /dev/null instead of a pipe this script
//           drains; then extra environment for that server only, e.g.
//           OFFPEAK_NO_REEXEC=1)
//   CONNS=4 (default 32)
//   e.g. bun bench/ab/proxy-ab.ts 8 3 naive $PWD:warn $PWD:info /tmp/old:info
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuSeconds, engineArgs, freePort, peakRssMb, ROOT, threadCpuSeconds } from "../lib";
import { BENCH_KEY } from "../server";

const [rounds, seconds] = [Number(process.argv[2]), Number(process.argv[3])];
const specs = process.argv.slice(4);
const conns = Number(process.env.CONNS ?? 32);
if (!(rounds > 0 && seconds > 0 && specs.length > 0)) {
  console.error("usage: bun bench/ab/proxy-ab.ts ROUNDS SECONDS naive|TREE:LEVEL[:pipe|null][:NAME=VALUE,...] ...");
  process.exit(2);
}
const here = ROOT;
const work = mkdtempSync(join(tmpdir(), "offpeak-proxy-ab-"));
const lua = join(work, "wrk.lua");
const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
writeFileSync(lua, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${BENCH_KEY}"\n`);
const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, ...engineArgs({ ports: [upPort] })], { stdout: "ignore" });
const upBase = `http://127.0.0.1:${upPort}/v1`;
const config = { upstreams: [{ name: "fake", base_url: upBase, models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] };

/** The thread that used the most CPU between two readings: its name and seconds. */
function busiest(before: Map<string, { name: string; seconds: number }>, after: Map<string, { name: string; seconds: number }>): { name: string; seconds: number } {
  let top = { name: "-", seconds: 0 };
  for (const [tid, t] of after) {
    const used = t.seconds - (before.get(tid)?.seconds ?? 0);
    if (used > top.seconds) top = { name: `${t.name}#${tid}`, seconds: used };
  }
  return top;
}

async function start(spec: string) {
  const port = await freePort();
  if (spec === "naive") {
    const p = Bun.spawn([process.execPath, join(here, "bench/naive-proxy.ts"), String(port), upBase], { stdout: "ignore" });
    return { spec, p, url: `http://127.0.0.1:${port}/v1/chat/completions`, health: `http://127.0.0.1:${port}/` };
  }
  const [tree, level, sink, extra] = spec.split(":");
  const extraEnv = Object.fromEntries((extra ?? "").split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
  const dataDir = mkdtempSync(join(work, "data-"));
  writeFileSync(join(dataDir, "config.json"), JSON.stringify(config));
  const p = Bun.spawn([process.execPath, join(tree!, "src/main.ts"), "serve", "--port", String(port), "--data-dir", dataDir, "--config", join(dataDir, "config.json")], {
    cwd: tree,
    env: { ...process.env, OFFPEAK_ADMIN_KEY: BENCH_KEY, OFFPEAK_LOG_LEVEL: level ?? "info", ...extraEnv },
    stdout: "ignore",
    stderr: sink === "null" ? Bun.file("/dev/null") : "pipe",
  });
  if (sink !== "null") void (async () => {
    for await (const _ of p.stderr as ReadableStream<Uint8Array>); // drained, as a log collector would
  })();
  return { spec, p, url: `http://127.0.0.1:${port}/api/v1/chat/completions`, health: `http://127.0.0.1:${port}/healthz` };
}

async function wrk(url: string) {
  const w = Bun.spawn(["wrk", conns >= 2 ? "-t2" : "-t1", `-c${conns}`, `-d${seconds}s`, "--latency", "-s", lua, url], { stdout: "pipe" });
  const out = await new Response(w.stdout).text();
  const m = /\s99%\s+([\d.]+)(us|ms|s)/.exec(out);
  const p99 = m ? Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1) : NaN;
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]), requests: Number(/(\d+) requests in/.exec(out)?.[1]), p99 };
}

const servers: Awaited<ReturnType<typeof start>>[] = [];
try {
  for (const s of specs) servers.push(await start(s));
  for (const s of servers)
    for (let i = 0; i < 200; i++) {
      try {
        await fetch(s.health);
        break;
      } catch {}
      await Bun.sleep(50);
    }
  for (const s of servers) await wrk(s.url); // warm-up
  const runs = servers.map(() => [] as { rps: number; p99: number; cpu: number; main: number; sys: number; top: number; topName: string }[]);
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < servers.length; k++) {
      const i = (r + k) % servers.length;
      const s = servers[i]!;
      const c0 = cpuSeconds(s.p.pid);
      const m0 = cpuSeconds(s.p.pid, { thread: true });
      const k0 = cpuSeconds(s.p.pid, { only: "sys" });
      const t0 = threadCpuSeconds(s.p.pid);
      const w = await wrk(s.url);
      const top = busiest(t0, threadCpuSeconds(s.p.pid));
      const per = (secs: number) => (secs * 1e6) / w.requests;
      runs[i]!.push({
        rps: w.rps,
        p99: w.p99,
        cpu: per(cpuSeconds(s.p.pid) - c0),
        main: per(cpuSeconds(s.p.pid, { thread: true }) - m0),
        sys: per(cpuSeconds(s.p.pid, { only: "sys" }) - k0),
        top: per(top.seconds),
        topName: top.name,
      });
    }
    console.log(`round ${r + 1}: ` + servers.map((s, i) => `${s.spec} ${Math.round(runs[i]!.at(-1)!.rps)} req/s, p99 ${runs[i]!.at(-1)!.p99.toFixed(2)} ms, ${runs[i]!.at(-1)!.cpu.toFixed(1)} µs CPU (main thread ${runs[i]!.at(-1)!.main.toFixed(1)}, busiest ${runs[i]!.at(-1)!.topName} ${runs[i]!.at(-1)!.top.toFixed(1)})`).join(" | "));
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`medians over ${rounds} rounds of ${seconds} s, ${conns} connections (ratio: median of each round's ratio to the first server):`);
  for (let i = 0; i < servers.length; i++) {
    const x = runs[i]!;
    console.log(
      `${servers[i]!.spec}: ${Math.round(med(x.map((v) => v.rps)))} req/s, p99 ${med(x.map((v) => v.p99)).toFixed(2)} ms, CPU ${med(x.map((v) => v.cpu)).toFixed(1)} µs/request (in the kernel ${med(x.map((v) => v.sys)).toFixed(1)}; main thread ${med(x.map((v) => v.main)).toFixed(1)}, its busy share ${med(x.map((v) => (v.main * v.rps) / 1e6)).toFixed(2)}; the busiest thread ${med(x.map((v) => v.top)).toFixed(1)}, so at most ≈${Math.round(1e6 / med(x.map((v) => v.top)))} req/s with cores to spare), ` +
        `ratio ${med(x.map((v, r) => v.rps / runs[0]![r]!.rps)).toFixed(3)}, peak RSS ${peakRssMb(servers[i]!.p.pid).toFixed(0)} MB`,
    );
  }
} finally {
  for (const s of servers) s.p.kill();
  upstream.kill();
  rmSync(work, { recursive: true, force: true });
}

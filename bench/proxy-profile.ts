// Where a proxied chat request's CPU goes: one offpeak server (any tree)
// under `wrk -t2 -c32` against the zero-latency loopback upstream, run with
// `bun --cpu-prof`, then the profile's self time summed per function (top
// N) and per source file, as a share of the server's main-thread samples
// (for a function's callers or everything under it, open the .cpuprofile
// in Chrome's DevTools or read its nodes).
// Needs wrk.
//
//   bun bench/proxy-profile.ts [--tree DIR] [--level info|warn] [--seconds 10] [--top 40] [--out DIR]
//
// The profile file (.cpuprofile, Chrome's format) stays in --out for a
// closer look. Sampling costs the server some throughput: read the shares,
// not the req/s.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { BENCH_KEY, freePort } from "./server";
import { waitForHttp } from "./lib";

const { values: opt } = parseArgs({
  options: {
    tree: { type: "string", default: join(import.meta.dir, "..") },
    level: { type: "string", default: "info" },
    seconds: { type: "string", default: "10" },
    top: { type: "string", default: "40" },
    out: { type: "string" },
    interval: { type: "string", default: "250" },
  },
});
const here = join(import.meta.dir, "..");
const out = opt.out ?? mkdtempSync(join(tmpdir(), "offpeak-proxy-profile-"));
mkdirSync(out, { recursive: true });
const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
const lua = join(out, "wrk.lua");
writeFileSync(lua, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${BENCH_KEY}"\n`);
const upPort = await freePort();
const upstream = Bun.spawn([process.execPath, join(here, "bench/fake-upstream.ts"), String(upPort)], { stdout: "ignore" });
const dataDir = mkdtempSync(join(out, "data-"));
writeFileSync(
  join(dataDir, "config.json"),
  JSON.stringify({ upstreams: [{ name: "fake", base_url: `http://127.0.0.1:${upPort}/v1`, models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] }),
);
const port = await freePort();
const profDir = join(out, "prof");
const server = Bun.spawn(
  [process.execPath, "--cpu-prof", `--cpu-prof-dir=${profDir}`, `--cpu-prof-interval=${opt.interval}`, join(opt.tree!, "src/main.ts"), "serve", "--port", String(port), "--data-dir", dataDir, "--config", join(dataDir, "config.json")],
  {
    cwd: opt.tree,
    // No re-exec: the profiler's flags must stay on this process.
    env: { ...process.env, OFFPEAK_ADMIN_KEY: BENCH_KEY, OFFPEAK_LOG_LEVEL: opt.level!, MIMALLOC_PURGE_DELAY: "20" },
    stdout: "ignore",
    stderr: "pipe",
  },
);
void (async () => {
  for await (const _ of server.stderr as ReadableStream<Uint8Array>); // drained, as a log collector would
})();
try {
  await waitForHttp(`http://127.0.0.1:${port}/healthz`);
  const url = `http://127.0.0.1:${port}/api/v1/chat/completions`;
  const wrk = (s: number) => Bun.spawn(["wrk", "-t2", "-c32", `-d${s}s`, "-s", lua, url], { stdout: "pipe" });
  await new Response(wrk(2).stdout).text(); // warm-up
  const text = await new Response(wrk(Number(opt.seconds)).stdout).text();
  console.log(`req/s under the profiler: ${/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]}`);
} finally {
  server.kill("SIGTERM");
  await server.exited;
  upstream.kill();
}

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
const file = readdirSync(profDir).find((f) => f.endsWith(".cpuprofile"))!;
const prof = JSON.parse(readFileSync(join(profDir, file), "utf8")) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map<number, number>();
for (const s of prof.samples) self.set(s, (self.get(s) ?? 0) + 1);
const total = prof.samples.length;
const idleNames = new Set(["(idle)", "(program)"]);
let idle = 0;
const fn = new Map<string, number>();
const files = new Map<string, number>();
for (const [id, n] of self) {
  const f = byId.get(id)!.callFrame;
  if (idleNames.has(f.functionName)) {
    idle += n;
    continue;
  }
  const where = f.url ? f.url.replace(opt.tree!, "").replace(/^.*node_modules\//, "nm/") : "(native)";
  const key = `${f.functionName || "(anonymous)"}  ${where}:${f.lineNumber + 1}`;
  fn.set(key, (fn.get(key) ?? 0) + n);
  files.set(where, (files.get(where) ?? 0) + n);
}
const busy = total - idle;
const pct = (n: number) => ((100 * n) / busy).toFixed(1).padStart(5) + "%";
// Bun's sampler records the main thread while it runs; "(native)" at the root is Bun's own work between JS calls (HTTP, sockets, GC).
console.log(`${total} samples of the main thread (${idle} idle); shares of the others:`);
console.log("by source file:");
for (const [k, n] of [...files].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`  ${pct(n)}  ${k}`);
console.log("by function (self):");
for (const [k, n] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, Number(opt.top))) console.log(`  ${pct(n)}  ${k}`);
console.log(`profile: ${join(profDir, file)}`);

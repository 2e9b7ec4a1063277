// The proxied chat path's own cost, without sockets: offpeak's server
// fetch handler (request metrics and log, direct dispatch, auth, admission,
// the upstream call) called in-process with Requests at 32 in flight, the
// upstream fetch replaced by an immediate Response (so offpeak's own HTTP
// client is not measured: OFFPEAK_UPSTREAM_CLIENT=fetch), beside the naive proxy's
// handler measured the same way. Far less noisy than anything over
// loopback (medians agree within ≈3% between runs), it shows what a change
// to offpeak's own JavaScript saves; over sockets the same code costs about
// twice as much (colder caches), see docs/benchmarks/history.md ("Chat
// completions through a proxy"). Each measurement runs in its own process;
// trees alternate.
//   bun bench/ab/proxy-inproc.ts [rounds=3] [requests-per-sample=100000] TREE[:LEVEL[:NAME=VALUE,...]] ...
//   (TREE "naive": the naive handler; a TREE path is taken from the current directory;
//   NAME=VALUE: environment for that tree's process only)
import { resolve } from "node:path";
import { ROOT } from "../lib";

if (process.argv[2] !== "--child") {
  const rounds = Number(process.argv[2] ?? 3);
  const n = process.argv[3] ?? "100000";
  const specs = process.argv.slice(4);
  if (specs.length === 0) specs.push("naive", `${ROOT}:info`, `${ROOT}:warn`);
  const results = new Map<string, number[]>();
  for (let r = 0; r < rounds; r++)
    for (const spec of specs) {
      const [tree, level, extra] = spec.split(":");
      const extraEnv = Object.fromEntries((extra ?? "").split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
      const p = Bun.spawn([process.execPath, import.meta.path, "--child", tree === "naive" ? ROOT : resolve(tree!), n, "5"], {
        env: { ...process.env, OFFPEAK_NO_REEXEC: "1", LEVEL: level ?? "info", NAIVE: tree === "naive" ? "1" : "", ...extraEnv },
        stdout: "pipe",
        stderr: "ignore",
      });
      const out = await new Response(p.stdout).text();
      const us = Number(/median ([\d.]+)/.exec(out)?.[1]);
      results.set(spec, [...(results.get(spec) ?? []), us]);
      console.log(`round ${r + 1} ${spec}: ${us.toFixed(2)} µs/request`);
    }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  for (const [spec, xs] of results) console.log(`${spec}: median ${med(xs).toFixed(2)} µs/request over ${xs.length} processes`);
  process.exit(0);
}
const tree = process.argv[3]!;
const N = Number(process.argv[4] ?? 100000);
const ROUNDS = Number(process.argv[5] ?? 5);
const { mkdtempSync, writeFileSync } = await import("node:fs");
const { resolveConfig } = await import(`${tree}/src/config.ts`);
const { startServer } = await import(`${tree}/src/server.ts`);
const { buildHandler, withRequestId } = await import(`${tree}/src/app.ts`);
const { observeRequests, requestObserver } = await import(`${tree}/src/metrics/http.ts`);
const KEY = "sk-op-bench-admin-key-000000000000000000000";
const dir = mkdtempSync(`${(await import("node:os")).tmpdir()}/offpeak-inproc-`);
const upBody = JSON.stringify({ id: "chatcmpl-fake", object: "chat.completion", created: 0, model: "fake-model", choices: [{ index: 0, message: { role: "assistant", content: "Say hello to the benchmark." }, finish_reason: "stop", logprobs: null }], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
const realFetch = globalThis.fetch;
let upCalls = 0;
// discovery at start uses GET /models
globalThis.fetch = (async (url: string, init?: RequestInit) => {
  if (String(url).endsWith("/models")) return Response.json({ object: "list", data: [{ id: "fake-model", object: "model", created: 0, owned_by: "fake" }] });
  upCalls++;
  return new Response(upBody, { headers: { "content-type": "application/json" } });
}) as typeof fetch;
writeFileSync(`${dir}/c.json`, JSON.stringify({ upstreams: [{ name: "fake", base_url: "http://127.0.0.1:9/v1", models: ["fake-model"], max_concurrency: 256, queue_size: 1024 }] }));
const config = resolveConfig(["--port", "0", "--data-dir", dir, "--config", `${dir}/c.json`], { OFFPEAK_ADMIN_KEY: KEY, OFFPEAK_LOG_LEVEL: process.env.LEVEL ?? "info", OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_UPSTREAM_CLIENT: "fetch" });
const server = await startServer(config, { quiet: true });
const app = buildHandler(server.ctx);
// Trees from before requestObserver took the context and the app.
const observed = requestObserver ? observeRequests(requestObserver(server.ctx, app.routes), app.fetch, withRequestId) : observeRequests(server.ctx, app, withRequestId);
const naive = async (req: Request) => {
  const res = await fetch("http://127.0.0.1:9/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: await req.text() });
  return new Response(await res.text(), { status: res.status, headers: { "content-type": "application/json" } });
};
const handle = process.env.NAIVE ? (naive as any) : observed;
const fakeServer = { requestIP: () => ({ address: "127.0.0.1" }) };
const body = JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 16 });
// With its Content-Length, as wrk sends it (without one, the body is read as a stream: another, dearer path).
const mk = () => new Request("http://127.0.0.1:8080/api/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), authorization: `Bearer ${KEY}`, host: "127.0.0.1:8080", "user-agent": "wrk" }, body });
async function one() {
  const res = await handle(mk(), fakeServer as any);
  await res.text();
  if (res.status !== 200) throw new Error(`status ${res.status}`);
}
async function round(n: number): Promise<number> {
  const t0 = performance.now();
  let left = n;
  const worker = async () => { while (left-- > 0) await one(); };
  await Promise.all(Array.from({ length: 32 }, worker));
  return ((performance.now() - t0) * 1000) / n;
}
await round(20000);
const xs: number[] = [];
for (let r = 0; r < ROUNDS; r++) xs.push(await round(N));
xs.sort((a, b) => a - b);
console.log(`${tree} ${process.env.LEVEL ?? "info"}: median ${xs[Math.floor(xs.length / 2)]!.toFixed(2)} µs/request (${xs.map((x) => x.toFixed(2)).join(" ")}), upstream calls ${upCalls}`);
globalThis.fetch = realFetch;
await server.stop();
(await import("node:fs")).rmSync(dir, { recursive: true, force: true });
process.exit(0);

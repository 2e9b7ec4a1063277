// The engine (./engineReplicas.ts) as a process of its own: a benchmark's
// engine, whose CPU is then not the benchmark's (bench/lib.ts engineArgs).
//
//   bun test/helpers/engineCli.ts --ports P[,P…] [--models m[,m…]]
//       [--latency-ms L (a fixed latency: fixedLatencyShape) | --decode-ms D
//        --prefill-ms P --max-running R --cache C --max-queued Q]
//       [--control-port C] [--count-contents] [--arrivals] [--idle-timeout-s 120]
//
// One replica a port (index = its place in --ports; 0: any free port), all
// printed on stdout once listening ("engine replicas on ports …"). The
// control port answers, for all the replicas together:
//   GET  /count   {posts, probes, inFlight, up}    (cheap, for polling)
//   GET  /stats   the summed stats (sumStats), and: requests (= seen),
//                 maxInFlight (= peakInFlight); with --count-contents distinct,
//                 resent (contents received more than once), extra (sends
//                 beyond the first); with --arrivals t0, postTimes and
//                 probeTimes (each arrival, ms since t0, sorted) and events
//                 (each down and up, Date.now())
//   POST /reset   zeroes the counts (caches kept); answers {at} (the new t0)
//   POST /down    kill(): every connect refused from the answer on; {at, inFlight}
//   POST /up      restart() on the same ports; {at}
// The idle timeout is long by default so that an upstream's kept-alive
// connections are not closed under it during a long benchmark.
import { fixedLatencyShape, startEngineReplicas, type ReplicaShape } from "./engineReplicas";

const argv = process.argv.slice(2);
const opt = (name: string) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : undefined);
const num = (name: string) => (opt(name) === undefined ? undefined : Number(opt(name)));
const ports = (opt("ports") ?? "0").split(",").map(Number);
const latency = num("latency-ms");
const shape: Partial<ReplicaShape> =
  latency !== undefined
    ? fixedLatencyShape(latency)
    : Object.fromEntries(
        Object.entries({ decodeMs: num("decode-ms"), prefillMsPerKChar: num("prefill-ms"), maxRunning: num("max-running"), cachePrefixes: num("cache"), maxQueued: num("max-queued") }).filter(
          ([, v]) => v !== undefined,
        ),
      );
const engines = await startEngineReplicas(ports.length, shape, {
  ports,
  models: opt("models")?.split(","),
  idleTimeout: num("idle-timeout-s") ?? 120,
  countContents: argv.includes("--count-contents"),
  arrivals: argv.includes("--arrivals"),
});
let t0 = Date.now();
let events: { kind: "down" | "up"; at: number }[] = [];
const since = (times: number[][]) => times.flat().sort((a, b) => a - b).map((t) => t - t0);
const control = num("control-port");
if (control !== undefined)
  Bun.serve({
    port: control,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path === "/count") {
        const t = engines.total();
        return Response.json({ posts: t.seen, probes: t.probes, inFlight: t.inFlight, up: t.up });
      }
      if (req.method === "GET" && path === "/stats") {
        const t = engines.total();
        const out: Record<string, unknown> = { ...t, requests: t.seen, maxInFlight: t.peakInFlight };
        if (argv.includes("--count-contents")) {
          let distinct = 0;
          let resent = 0;
          let extra = 0;
          const all = new Map<string, number>();
          for (const r of engines.replicas) for (const [c, n] of r.contents()) all.set(c, (all.get(c) ?? 0) + n);
          for (const n of all.values()) {
            distinct++;
            if (n > 1) {
              resent++;
              extra += n - 1;
            }
          }
          Object.assign(out, { distinct, resent, extra });
        }
        if (argv.includes("--arrivals"))
          Object.assign(out, {
            t0,
            postTimes: since(engines.replicas.map((r) => r.arrivals().posts)),
            probeTimes: since(engines.replicas.map((r) => r.arrivals().probes)),
            events,
          });
        return Response.json(out);
      }
      if (req.method === "POST" && path === "/reset") {
        engines.reset({ keepCache: true });
        t0 = Date.now();
        events = [];
        return Response.json({ at: t0 });
      }
      if (req.method === "POST" && path === "/down") {
        let inFlight = 0;
        for (const r of engines.replicas) inFlight += await r.kill();
        // After the stop: from here on every connect is refused.
        const at = Date.now();
        events.push({ kind: "down", at });
        return Response.json({ at, inFlight });
      }
      if (req.method === "POST" && path === "/up") {
        for (const r of engines.replicas) await r.restart();
        const at = Date.now();
        events.push({ kind: "up", at });
        return Response.json({ at });
      }
      return new Response("not found", { status: 404 });
    },
  });
console.log(`engine replicas on ports ${engines.replicas.map((r) => r.port).join(",")}${control !== undefined ? `, control on ${control}` : ""}`);

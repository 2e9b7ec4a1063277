// The loopback engine for bench/cluster.ts, in a process of its own:
//   bun bench/cluster-engine.ts PORT CONTROL_PORT [LATENCY_MS=20]
// PORT is test/helpers/fakeUpstream.ts (model "fake-chat", answers after
// LATENCY_MS, counts every request by its message content). CONTROL_PORT:
//   POST /reset  clears the counters
//   GET  /stats  {requests, distinct, resent, extra, maxInFlight, inFlight, byStatus}
//                resent: contents received more than once; extra: sends beyond the first
import { startFakeUpstream } from "../test/helpers/fakeUpstream";

const port = Number(process.argv[2]);
const controlPort = Number(process.argv[3]);
const latencyMs = Number(process.argv[4] ?? 20);
if (!port || !controlPort) throw new Error("usage: bun bench/cluster-engine.ts PORT CONTROL_PORT [LATENCY_MS]");

const fake = await startFakeUpstream({ models: ["fake-chat"], latencyMs, port });

Bun.serve({
  port: controlPort,
  hostname: "127.0.0.1",
  fetch(req) {
    const path = new URL(req.url).pathname;
    if (req.method === "POST" && path === "/reset") {
      fake.reset();
      return Response.json({ ok: true });
    }
    if (req.method === "GET" && path === "/stats") {
      let resent = 0;
      let extra = 0;
      for (const n of fake.counts.values())
        if (n > 1) {
          resent++;
          extra += n - 1;
        }
      return Response.json({
        requests: fake.stats.requests,
        distinct: fake.counts.size,
        resent,
        extra,
        maxInFlight: fake.stats.maxInFlight,
        inFlight: fake.stats.inFlight,
        byStatus: Object.fromEntries(fake.stats.byStatus),
      });
    }
    return new Response("not found", { status: 404 });
  },
});
console.log(`cluster engine on ${port} (latency ${latencyMs} ms), control on ${controlPort}`);

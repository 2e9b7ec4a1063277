// A reference point for the chat benchmark, not a baseline: the naive proxy
// (bench/naive-proxy.ts) written as an Elysia route that parses the JSON body
// and serialises it again, as any proxy that reads the request must. The gap
// between it and the naive proxy is what the framework and the parse cost
// before offpeak does anything of its own (auth, limits, scheduling, metrics).
// `bun bench/elysia-proxy.ts PORT UPSTREAM_BASE`
import { Elysia } from "elysia";

const [port, upstream] = [Number(process.argv[2]), process.argv[3]!];
new Elysia()
  .post("/v1/chat/completions", async ({ body }) => {
    const res = await fetch(upstream + "/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return new Response(await res.text(), { status: res.status, headers: { "content-type": "application/json" } });
  })
  .listen({ port, hostname: "127.0.0.1" });

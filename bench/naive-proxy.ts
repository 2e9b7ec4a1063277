// The baseline for the chat benchmark: the simplest Bun.serve + fetch proxy
// (no auth, no validation, no limits). `bun bench/naive-proxy.ts PORT UPSTREAM_BASE`
const [port, upstream] = [Number(process.argv[2]), process.argv[3]!];
Bun.serve({
  port,
  hostname: "127.0.0.1",
  async fetch(req) {
    const res = await fetch(upstream + "/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: await req.text() });
    return new Response(await res.text(), { status: res.status, headers: { "content-type": "application/json" } });
  },
});

export {};

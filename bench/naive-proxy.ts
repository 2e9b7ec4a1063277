// The baseline for the chat benchmark: the simplest Bun.serve + fetch proxy
// (no auth, no validation, no limits). `bun bench/naive-proxy.ts PORT UPSTREAM_BASE[,UPSTREAM_BASE…] [PATH=/chat/completions]`
// Several upstreams: each request to the next in turn (the baseline of a spread over replicas).
const [port, upstreams, path] = [Number(process.argv[2]), process.argv[3]!.split(","), process.argv[4] ?? "/chat/completions"];
let turn = 0;
Bun.serve({
  port,
  hostname: "127.0.0.1",
  async fetch(req) {
    const upstream = upstreams[turn++ % upstreams.length]!;
    const res = await fetch(upstream + path, { method: "POST", headers: { "content-type": "application/json" }, body: await req.text() });
    return new Response(await res.text(), { status: res.status, headers: { "content-type": "application/json" } });
  },
});

export {};

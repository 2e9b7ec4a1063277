// Runs every benchmark one after another (never two at once: they share the
// machine's cores) and prints each one's output. BENCHMARKS.md has what each
// measures and the latest figures. Usage: bun bench/all.ts   (or npm run bench)
const benches: [string, string[]][] = [
  ["upload", ["bench/upload.ts"]],
  ["batch on offpeak-echo (1M lines)", ["bench/batch-echo.ts"]],
  ["batch against an upstream", ["bench/batch-upstream.ts", "200000"]],
  ["chat completions through a proxy", ["bench/chat-proxy.ts"]],
  ["responses through a proxy, beside chat", ["bench/responses-proxy.ts"]],
  ["responses batch beside a chat batch (1M lines)", ["bench/responses-batch.ts"]],
  ["off-peak priority", ["bench/priority.ts"]],
  ["upstream outages (100k lines, 30 s and 120 s)", ["bench/outage.ts"]],
  ["no stall at a batch's end (1M lines)", ["bench/stall.ts"]],
  ["following batches: events, retry, webhooks", ["bench/follow.ts"]],
];
let failed = 0;
for (const [name, args] of benches) {
  console.log(`\n=== ${name}: bun ${args.join(" ")}`);
  const p = Bun.spawn([process.execPath, ...args], { stdout: "inherit", stderr: "inherit", env: { ...process.env, OFFPEAK_LOG_LEVEL: "warn" } });
  if ((await p.exited) !== 0) failed++;
}
process.exit(failed ? 1 : 0);

export {};

// Screenshots of the web console for the README: a real server on a fresh
// data dir, filled through the public API (batches done, running, failed,
// cancelled and retried; files; keys; a webhook endpoint), photographed in
// Debian's chromium with playwright-core.
//
//   bun scripts/screenshots.ts            # → docs/console/*.png
//
// OFFPEAK_CHROMIUM overrides /usr/bin/chromium.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Page } from "playwright-core";
import { resolveConfig } from "../src/config";
import { startServer } from "../src/server";

const OUT = join(import.meta.dir, "..", "docs", "console");
const KEY = "sk-op-screenshots-admin-key-000000000000000";
const CHROMIUM = process.env.OFFPEAK_CHROMIUM || "/usr/bin/chromium";
const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

const dataDir = mkdtempSync(join(tmpdir(), "offpeak-shots-"));
const configPath = join(dataDir, "config.json");
// A slow echo (≈50 lines/s) so that one batch is caught running; prices so that costs show.
writeFileSync(
  configPath,
  JSON.stringify({ models: { "offpeak-echo": { latency_ms: 40, max_concurrency: 2, pricing: { input_per_million: 0.6, output_per_million: 2.4 } } } }),
);
const server = await startServer(resolveConfig(["--port", "0", "--data-dir", dataDir, "--config", configPath], { OFFPEAK_ADMIN_KEY: KEY, OFFPEAK_LOG_LEVEL: "error" }), { quiet: true });
const base = `${server.url}/api/v1`;

async function api(path: string, init: RequestInit = {}): Promise<any> {
  const res = await fetch(base + path, { ...init, headers: { authorization: `Bearer ${KEY}`, ...(init.headers as Record<string, string>) } });
  if (!res.ok) throw new Error(`${init.method ?? "GET"} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}
const post = (path: string, body: unknown) => api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

const QUESTIONS = ["Summarise this support ticket", "Translate to French: good morning", "Classify the sentiment of this review", "Extract the invoice total", "Write a product title"];
const line = (id: string, i: number, model = "offpeak-echo") =>
  JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model, messages: [{ role: "user", content: `${QUESTIONS[i % QUESTIONS.length]} #${i}` }] } });

async function uploadLines(name: string, lines: string[], purpose = "batch") {
  const form = new FormData();
  form.append("purpose", purpose);
  form.append("file", new Blob([lines.join("\n") + "\n"]), name);
  return api("/files", { method: "POST", body: form });
}
async function startBatch(name: string, lines: string[], metadata?: Record<string, string>) {
  const f = await uploadLines(name, lines);
  return post("/batches", { input_file_id: f.id, endpoint: "/v1/chat/completions", completion_window: "24h", ...(metadata ? { metadata } : {}) });
}
async function waitFinal(id: string) {
  for (;;) {
    const b = await api(`/batches/${id}`);
    if (["completed", "failed", "expired", "cancelled"].includes(b.status)) return b;
    await Bun.sleep(100);
  }
}

// ── data ──────────────────────────────────────────────────────────────
await post("/keys", { name: "ci pipeline", scopes: ["files:read", "files:write", "batches:read", "batches:write"] });
await post("/keys", { name: "dashboard (read-only)", scopes: ["files:read", "batches:read"], project: "analytics" });
await post("/keys", { name: "chat app", scopes: ["inference"], rate_limits: { rpm: 600, tpm: 200000 } });
await post("/webhook_endpoints", { url: "https://hooks.example.com/offpeak" });
await uploadLines("glossary.txt", ["offpeak: batch work on idle capacity"], "user_data");

const done = await startBatch("tickets-2026-11.jsonl", Array.from({ length: 120 }, (_, i) => line(`ticket-${i}`, i)), { description: "November support tickets" });
await waitFinal(done.id);
// Fails validation: two lines name a model the server does not have.
const invalid = await startBatch("reviews.jsonl", Array.from({ length: 40 }, (_, i) => line(`review-${i}`, i, i === 7 || i === 23 ? "gpt-nonexistent" : "offpeak-echo")));
await waitFinal(invalid.id);
const cancelled = await startBatch("catalog.jsonl", Array.from({ length: 600 }, (_, i) => line(`sku-${i}`, i)), { description: "Product titles" });
await Bun.sleep(1500);
await api(`/batches/${cancelled.id}/cancel`, { method: "POST" });
await waitFinal(cancelled.id);
const running = await startBatch("invoices.jsonl", Array.from({ length: 3000 }, (_, i) => line(`invoice-${i}`, i)), { description: "Invoice totals, Q3" });
await Bun.sleep(4000);

// ── pictures ──────────────────────────────────────────────────────────
mkdirSync(OUT, { recursive: true });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
async function shoot(name: string, hash: string, opts: { width?: number; height?: number; dark?: boolean; signedOut?: boolean; ready: (p: Page) => Promise<unknown>; full?: boolean }) {
  const ctx = await browser.newContext({ viewport: { width: opts.width ?? 1280, height: opts.height ?? 800 }, colorScheme: opts.dark ? "dark" : "light", deviceScaleFactor: 1 });
  const page = await ctx.newPage();
  if (!opts.signedOut) await page.addInitScript(`sessionStorage.setItem("offpeak.key", ${JSON.stringify(KEY)})`);
  await page.goto(`${server.url}/${hash}`);
  await opts.ready(page);
  await page.waitForTimeout(600); // progress bars ease in
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage: opts.full ?? false });
  await ctx.close();
  console.log(`docs/console/${name}.png`);
}

await shoot("sign-in", "", { signedOut: true, width: 900, height: 560, ready: (p) => p.getByLabel("API key").waitFor() });
await shoot("batches", "#/batches", { ready: (p) => p.getByRole("progressbar", { name: `Progress of ${running.id}` }).waitFor() });
await shoot("batch", `#/batches/${running.id}`, { full: true, ready: (p) => p.getByRole("button", { name: "Cancel batch" }).waitFor() });
await shoot("batch-failed", `#/batches/${invalid.id}`, { full: true, ready: (p) => p.getByRole("heading", { name: "Errors" }).waitFor() });
await shoot("new-batch", "#/batches/new", {
  ready: async (p) => {
    await p.getByLabel("JSONL file").setInputFiles({ name: "questions.jsonl", mimeType: "application/jsonl", buffer: Buffer.from([line("q1", 1), line("q2", 2), '{"custom_id": "q3", "method": "POST"'].join("\n") + "\n") });
    await p.getByRole("alert").waitFor();
  },
});
await shoot("files", "#/files", { ready: (p) => p.getByText("invoices.jsonl").waitFor() });
await shoot("status", "#/status", { ready: (p) => p.getByRole("table", { name: /Models/ }).waitFor() });
await shoot("keys", "#/keys", { full: true, ready: (p) => p.getByText("dashboard (read-only)").waitFor() });
await shoot("batches-phone-dark", "#/batches", { width: 390, height: 844, dark: true, ready: (p) => p.getByRole("progressbar", { name: `Progress of ${running.id}` }).waitFor() });

await browser.close();
await api(`/batches/${running.id}/cancel`, { method: "POST" });
await server.stop();
rmSync(dataDir, { recursive: true, force: true });

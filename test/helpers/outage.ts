// Helpers for the upstream-trouble tests (docs/CONTRACT.md §11): batch lines for a fake
// upstream's model, GET /status and /metrics readers, and a config file
// naming one upstream.
import { expect } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A chat line for `model`; `content` is what the fake upstream counts it by and echoes back. */
export function upstreamLine(customId: string, content: string, model = "fake-chat"): string {
  return JSON.stringify({ custom_id: customId, method: "POST", url: "/v1/chat/completions", body: { model, messages: [{ role: "user", content }] } });
}

/** `n` lines `${prefix}-${i}` whose contents are unique to this prefix. */
export function upstreamLines(prefix: string, n: number, model = "fake-chat"): { ids: string[]; contents: Map<string, string>; text: string[] } {
  const ids: string[] = [];
  const contents = new Map<string, string>();
  const text: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${prefix}-${i}`;
    const content = `${prefix} line ${i}`;
    ids.push(id);
    contents.set(id, content);
    text.push(upstreamLine(id, content, model));
  }
  return { ids, contents, text };
}

/** A temp dir holding a config file with one upstream (and whatever else `extra` adds). */
export function writeUpstreamConfig(prefix: string, upstream: Record<string, unknown>, extra: Record<string, unknown> = {}): { path: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const path = join(dir, "config.json");
  writeFileSync(path, JSON.stringify({ upstreams: [upstream], ...extra }));
  return { path, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface UpstreamReport {
  name: string;
  healthy: boolean;
  since: number;
  last_error: string | null;
}

export interface StatusView {
  status: string;
  upstream: UpstreamReport | undefined;
  raw: any;
}

/** GET /status, with the entry for upstream `name` picked out of `upstreams` (undefined if absent). */
export async function readStatus(api: (path: string) => Promise<Response>, name: string): Promise<StatusView> {
  const res = await api("/status");
  expect(res.status).toBe(200);
  const raw = (await res.json()) as any;
  const upstream = Array.isArray(raw.upstreams) ? (raw.upstreams as UpstreamReport[]).find((u) => u.name === name) : undefined;
  return { status: raw.status, upstream, raw };
}

export type Samples = Map<string, number>;

/** Prometheus text → `name{labels}` → value. */
export function parseMetrics(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

export async function scrapeMetrics(api: (path: string) => Promise<Response>): Promise<Samples> {
  const res = await api("/metrics");
  expect(res.status).toBe(200);
  return parseMetrics(await res.text());
}

/** `offpeak_upstream_up{upstream="name"}`, or undefined if the series is absent. */
export const upGauge = (s: Samples, name: string): number | undefined => s.get(`offpeak_upstream_up{upstream="${name}"}`);

/**
 * The state changes counted for upstream `name`, summed over the other labels
 * (e.g. `to="down"`, `to="up"`), from any counter named like
 * offpeak_upstream_state_change(s)_total or offpeak_upstream_transitions_total.
 */
export function stateChanges(s: Samples, name: string, to?: "up" | "down"): number {
  let n = 0;
  for (const [k, v] of s) {
    if (!/^offpeak_upstream_(state_changes?|transitions)_total\{/.test(k)) continue;
    if (!k.includes(`upstream="${name}"`)) continue;
    if (to && !new RegExp(`(to|state)="${to}"`).test(k)) continue;
    n += v;
  }
  return n;
}
